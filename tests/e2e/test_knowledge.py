"""The knowledge base through ``python app.py`` on Telegram (issue 46, DESIGN §14): an admin adds a PDF by sending
it with ``/kb add``; a question in that group gets a tool result citing the right page; another group never sees
it; ``/kb remove`` takes it out of search; a corrupt file and a 200 MB file get clear notes and change nothing."""

from __future__ import annotations

import json
import sqlite3
import time

from tests.e2e.test_telegram import settings, wait_chat
from tests.fakes.bot_process import BotProcess
from tests.fakes.documents import make_pdf
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.knowledge.test_knowledge import MANUAL

ADMIN, MEMBER = 7, 8
GROUP, OTHER = -1001, -1002


def documents(folder):
    with sqlite3.connect(folder / "data" / "chatbot.db") as db:
        return db.execute("SELECT scope, name, pages, chunks, added_by FROM knowledge_documents").fetchall()


def ask(api, llm, chat, query, answer, n):
    """Ask the bot in a group; the model calls knowledge_search(query), then answers. Returns the request that
    carried the tool result."""
    llm.enqueue_tool_calls([("knowledge_search", json.dumps({"query": query}))])
    llm.enqueue_text(answer)
    before = len(llm.requests)
    api.push_text(chat, f"@{api.username} {query}?", user_id=MEMBER, chat_type="supergroup", title=f"G{chat}")
    wait_chat(api, chat, lambda t: len(t) >= n and t[n - 1] == answer, timeout=30)
    return llm.requests[before + 1]


def tool_result(request) -> str:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"][-1]


def system_text(request) -> str:
    return request["messages"][0]["content"]


def test_add_ask_isolate_remove_and_refuse(tmp_path):
    with FakeTelegramAPI() as api, FakeOpenAIServer() as llm:
        bot = BotProcess(tmp_path, **settings(api, llm, admin_users=[f"telegram:{ADMIN}"])).start()
        group = {"chat_type": "supergroup", "title": f"G{GROUP}"}
        try:
            api.push_document(GROUP, make_pdf(MANUAL), user_id=ADMIN, file_name="zephyr.pdf", caption="/kb add",
                              **group)
            texts = wait_chat(api, GROUP, lambda t: len(t) == 1, timeout=60)
            assert texts == [f"Added zephyr.pdf in telegram-group-{GROUP}: 4 pages, 4 chunks indexed."]

            request = ask(api, llm, GROUP, "how long is the warranty", "24 months [zephyr.pdf, p. 3]", 2)
            result = tool_result(request)
            assert result.startswith("[zephyr.pdf, p. 3] Warranty. The Zephyr kettle is covered for 24 months")
            assert "# Knowledge base" in system_text(request) and "zephyr.pdf" in system_text(request)

            # another group (another scope) never sees it, and its prompt does not mention a knowledge base
            request = ask(api, llm, OTHER, "how long is the warranty", "I don't know.", 1)
            assert tool_result(request) == "This chat has no documents in its knowledge base."
            assert "Knowledge base" not in system_text(request)

            # a member may list, not add
            api.push_document(GROUP, b"# Notes\nhello", user_id=MEMBER, file_name="notes.md",
                              mime_type="text/markdown", caption="/kb add", **group)
            assert wait_chat(api, GROUP, lambda t: len(t) == 3)[2] == "Sorry, /kb add is for admins."

            # a corrupt file and a 200 MB one (declared; refused before any download) get clear notes
            api.push_document(GROUP, b"%PDF-1.4\nthis is not a pdf", user_id=ADMIN, file_name="broken.pdf",
                              caption="/kb add", **group)
            note = wait_chat(api, GROUP, lambda t: len(t) == 4)[3]
            assert note.startswith("broken.pdf was not added: it is not a readable PDF")
            downloads = len(api.downloads)
            api.push_document(GROUP, b"", user_id=ADMIN, file_name="huge.pdf", caption="/kb add",
                              declared_size=200 * 1024 * 1024, **group)
            note = wait_chat(api, GROUP, lambda t: len(t) == 5)[4]
            assert note == ("huge.pdf was not added: it is 200.0 MB; the knowledge base takes documents of at most "
                            "50 MB (knowledge_max_mb).")
            assert len(api.downloads) == downloads
            # a 30 MB file is within the cap but over what the Bot API serves: the platform's refusal, plainly
            api.push_document(GROUP, b"", user_id=ADMIN, file_name="big.pdf", caption="/kb add",
                              declared_size=30 * 1024 * 1024, **group)
            note = wait_chat(api, GROUP, lambda t: len(t) == 6)[5]
            assert note.startswith("I could not fetch big.pdf (") and "knowledge" in note

            # /kb add as a reply to a document, into a named scope the group then uses
            doc = api.add_file(b"# Holidays\nEveryone gets 25 days of holiday a year.", folder="documents",
                               suffix=".md")
            replied = {"message_id": 999, "date": int(time.time()), "chat": {"id": GROUP, **{"type": "supergroup",
                       "title": f"G{GROUP}"}}, "from": {"id": ADMIN, "is_bot": False, "first_name": "A"},
                       "document": {**doc, "file_name": "handbook.md", "mime_type": "text/markdown"}}
            api.push_text(GROUP, "/kb add handbook", user_id=ADMIN, reply_to_message=replied, **group)
            assert wait_chat(api, GROUP, lambda t: len(t) == 7)[6] == "Added handbook.md in handbook: 1 section, " \
                                                                      "1 chunk indexed."
            api.push_text(GROUP, "/kb use handbook", user_id=ADMIN, **group)
            assert wait_chat(api, GROUP, lambda t: len(t) == 8)[7] == "This chat now searches handbook too."

            api.push_text(GROUP, "/kb", user_id=MEMBER, **group)
            # (Telegram shows the "- " list as bullets)
            listed = [line for line in wait_chat(api, GROUP, lambda t: len(t) == 9)[8].splitlines() if line]
            assert listed[0] == f"Scopes this chat searches: global, telegram-group-{GROUP}, handbook."
            assert listed[1] == "2 documents:"
            assert listed[2].startswith("• handbook.md (handbook): 1 section, 1 chunk, added by telegram:7, ")
            assert listed[3].startswith(f"• zephyr.pdf (telegram-group-{GROUP}): 4 pages, 4 chunks, added by "
                                        "telegram:7, ")

            api.push_text(GROUP, "/kb remove zephyr.pdf", user_id=ADMIN, **group)
            assert wait_chat(api, GROUP, lambda t: len(t) == 10)[9] == \
                f"Removed zephyr.pdf from telegram-group-{GROUP} (4 chunks)."
            request = ask(api, llm, GROUP, "how long is the warranty", "Not in the documents.", 11)
            assert "zephyr.pdf" not in tool_result(request)
        finally:
            assert bot.stop() == 0
        assert documents(tmp_path) == [("handbook", "handbook.md", 1, 1, "telegram:7")]
        assert "Traceback" not in bot.log()


def test_knowledge_auto_puts_the_best_passages_in_the_turn_only(tmp_path):
    with FakeTelegramAPI() as api, FakeOpenAIServer() as llm:
        bot = BotProcess(tmp_path, **settings(api, llm, admin_users=[f"telegram:{ADMIN}"], knowledge_auto=True)).start()
        try:
            api.push_document(ADMIN, make_pdf(MANUAL), user_id=ADMIN, file_name="zephyr.pdf", caption="/kb add")
            assert wait_chat(api, ADMIN, lambda t: len(t) == 1, timeout=60) == [
                "Added zephyr.pdf in global: 4 pages, 4 chunks indexed."]
            llm.enqueue_text("Two years: 24 months [zephyr.pdf, p. 3].")
            api.push_text(ADMIN, "how long is the warranty?", user_id=ADMIN)
            wait_chat(api, ADMIN, lambda t: len(t) == 2)
            user = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"][-1]
            assert user.startswith("[Passages from the knowledge base")
            assert "[zephyr.pdf, p. 3] Warranty. The Zephyr kettle is covered for 24 months" in user
            assert user.endswith("how long is the warranty?")
            # a chat without documents of its own still has global's; the passages are in the request only
            with sqlite3.connect(tmp_path / "data" / "chatbot.db") as db:
                stored = [json.loads(r[0]) for r in db.execute(
                    "SELECT content FROM messages WHERE session_id = ? AND content LIKE '%user%'",
                    (f"telegram:{ADMIN}",))]
            assert {"role": "user", "content": "how long is the warranty?"} in stored
            assert not any("Passages from the knowledge base" in json.dumps(m) for m in stored)
        finally:
            assert bot.stop() == 0
        assert "Traceback" not in bot.log()
