"""End to end, person notes (/me) and /export through app.py, the real python-telegram-bot and the fakes, on
SQLite and PostgreSQL: a private note never reaches a shared group session or another person's session."""

from __future__ import annotations

import io
import json
import stat
import time
import zipfile

from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI

BOT = "fake_test_bot"
ALICE, BOB, GROUP = 7001, 7002, -700
NOTE = "Alice is allergic to peanuts."
TEAM = {"chat_type": "supergroup", "title": "Team"}


def wait_text(api: FakeTelegramAPI, chat: int, check, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while not check(api.chat_texts(chat)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"chat {chat}: {api.chat_texts(chat)}")
        time.sleep(0.02)
    return api.chat_texts(chat)


def say(api: FakeTelegramAPI, llm: FakeOpenAIServer, chat: int, user: int, name: str, text: str,
        **chat_kw) -> tuple[str, list[dict]]:
    """Send ``text``; return the bot's next message in the chat and the model requests made meanwhile."""
    before, asked = len(api.chat_texts(chat)), len(llm.requests)
    api.push_text(chat, text, user_id=user, first_name=name, **chat_kw)
    wait_text(api, chat, lambda t: len(t) > before and t[-1].strip())
    time.sleep(0.2)  # a streamed answer may still be edited
    return api.chat_texts(chat)[before], llm.requests[asked:]


def shows_note(requests: list[dict]) -> bool:
    return any(NOTE in json.dumps(r["messages"], ensure_ascii=False) for r in requests)


def test_a_private_person_note_never_reaches_a_shared_group_or_another_person(tmp_path, db_url):
    with FakeTelegramAPI(username=BOT) as api, FakeOpenAIServer() as llm:
        proc = BotProcess(tmp_path, channel_type="telegram", telegram_bot_token=api.token,
                          telegram_base_url=api.base_url, telegram_rate_limit=False, open_ai_api_base=llm.base_url,
                          open_ai_api_key="test", data_dir="data", db_url=db_url, memory_embedding_model="",
                          group_shared_session=True).start()
        try:
            # Alice asks, in her private chat, to be remembered: the model writes a person note.
            llm.enqueue_stream("", tool_calls=[("memory_write", json.dumps({"text": NOTE, "scope": "person"}))])
            llm.enqueue_stream("I will remember that.")
            reply, _ = say(api, llm, ALICE, ALICE, "Alice", "please remember that I am allergic to peanuts")
            assert reply == "I will remember that."
            tool = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
            assert tool[-1]["content"].startswith("Saved to PERSON.md")
            person = tmp_path / "data" / "memory" / "people" / f"telegram_{ALICE}" / "PERSON.md"
            assert person.read_text(encoding="utf-8") == f"- {NOTE}\n"
            assert stat.S_IMODE(person.stat().st_mode) == 0o600
            # The shared group session: Alice speaks there, the note is not in any request.
            reply, asked = say(api, llm, GROUP, ALICE, "Alice", f"@{BOT} what do you know about me?", **TEAM)
            assert reply == "echo: [Alice] what do you know about me?" and asked and not shows_note(asked)
            # In the group, a person note cannot be written, and /me points to the private chat.
            llm.enqueue_stream("", tool_calls=[("memory_write", json.dumps({"text": "Alice likes jazz.",
                                                                             "scope": "person"}))])
            llm.enqueue_stream("Tell me in private.")
            say(api, llm, GROUP, ALICE, "Alice", f"@{BOT} remember I like jazz", **TEAM)
            tool = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
            assert tool[-1]["content"].startswith("Error: ValueError: scope 'person' works only in a private chat")
            assert person.read_text(encoding="utf-8") == f"- {NOTE}\n"
            assert say(api, llm, GROUP, ALICE, "Alice", "/me", **TEAM)[0] == "Please use /me in a private chat with me."
            # Bob's private chat: nothing of Alice's.
            reply, asked = say(api, llm, BOB, BOB, "Bob", "hello")
            assert reply == "echo: hello" and not shows_note(asked)
            assert say(api, llm, BOB, BOB, "Bob", "/me")[0].startswith("I keep no notes about you.")
            # Alice's private chat: the note is in the system prompt.
            reply, asked = say(api, llm, ALICE, ALICE, "Alice", "what should I not eat?")
            assert NOTE in asked[0]["messages"][0]["content"]
            listing = say(api, llm, ALICE, ALICE, "Alice", "/me")[0]
            assert f"1. {NOTE}" in listing.splitlines()
            # /export in the shared group is for admins; in Alice's private chat it is a document.
            refused = say(api, llm, GROUP, ALICE, "Alice", "/export", **TEAM)[0]
            assert refused == "Sorry, only admins can export a shared group conversation."
            reply = say(api, llm, ALICE, ALICE, "Alice", "/export")[0]
            assert reply.startswith("Here is the export of this conversation (")
            [document] = [d for d in api.documents if d["chat_id"] == ALICE]
            assert document["file_name"].startswith(f"export-telegram_{ALICE}-") and document["mime_type"] == \
                "application/zip"
            with zipfile.ZipFile(io.BytesIO(document["data"])) as z:
                data = json.loads(z.read("export.json"))
                md = z.read("export.md").decode()
                assert z.read("person/PERSON.md").decode() == f"- {NOTE}\n"
            assert data["parts"]["person_notes"]["notes"] == [NOTE]
            users = [m["content"]["content"] for m in data["parts"]["history"] if m["role"] == "user"]
            assert users == ["please remember that I am allergic to peanuts", "what should I not eat?"]
            assert "jazz" not in md and "Bob" not in md  # nothing of the group nor of Bob
            assert list((tmp_path / "data" / "exports").glob("*.zip")) == []  # sent, not kept
        finally:
            assert proc.stop() == 0
        assert "Traceback" not in proc.log()

        # After a restart with a session per member in groups: Alice's own group session gets her note, Bob's not.
        proc.settings["group_shared_session"] = False
        proc.start()
        try:
            reply, asked = say(api, llm, GROUP, ALICE, "Alice", f"@{BOT} hi", **TEAM)
            assert NOTE in asked[0]["messages"][0]["content"]
            reply, asked = say(api, llm, GROUP, BOB, "Bob", f"@{BOT} hi", **TEAM)
            assert reply == "echo: [Bob] hi" and not shows_note(asked)
            assert say(api, llm, ALICE, ALICE, "Alice", "/me forget all")[0] == "Deleted your one note."
            reply, asked = say(api, llm, ALICE, ALICE, "Alice", "and now?")
            assert not shows_note(asked) and not person.exists()
        finally:
            assert proc.stop() == 0
        assert "Traceback" not in proc.log()


def test_the_terminal_exports_to_a_path(tmp_path, openai_server, db_url):
    from tests.e2e.test_app import run_app, write_config

    path = write_config(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key="k", data_dir="data",
                        db_url=db_url, memory_embedding_model="")
    proc = run_app(path, "hello there\n/me add I like green tea.\n/export\n")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["echo: hello there", "Saved to PERSON.md (20 of 8,000 characters used)."]
    assert lines[2].startswith("Exported (2 stored messages, 1 person note) to ")
    [export] = list((tmp_path / "data" / "exports").glob("export-terminal_*.zip"))
    assert str(export) in lines[2] and stat.S_IMODE(export.stat().st_mode) == 0o600
    with zipfile.ZipFile(export) as z:
        data = json.loads(z.read("export.json"))
    assert [m["content"]["content"] for m in data["parts"]["history"]] == ["hello there", "echo: hello there"]
    assert data["parts"]["person_notes"]["notes"] == ["I like green tea."]
    assert "Traceback" not in proc.stderr


def test_weixin_sends_the_export_as_a_file(tmp_path):
    from tests.e2e.test_weixin import log_in, start_bot
    from tests.fakes.ilink_server import FakeILink

    user = "alice@im.wechat"
    with FakeILink(hold_s=2, qr_hold_s=2) as api, FakeOpenAIServer() as llm:
        bot = start_bot(tmp_path, api, llm, memory_embedding_model="")
        try:
            log_in(api)
            api.push_text(user, "hello")
            api.wait_sent(user, 1)
            api.push_text(user, "/me add I like green tea.")
            api.wait_sent(user, 2)
            api.push_text(user, "/export")
            texts = api.wait_sent(user, 4)
        finally:
            assert bot.stop() == 0
    assert texts[2] == "[file " + api.files[0]["file_name"] + "]"
    assert texts[3].startswith("Here is the export of this conversation (2 stored messages, 1 person note)")
    assert api.violations == []
    with zipfile.ZipFile(io.BytesIO(api.files[0]["data"])) as z:
        data = json.loads(z.read("export.json"))
    assert data["session"]["session_id"] == f"weixin:{user}"
    assert data["parts"]["person_notes"]["notes"] == ["I like green tea."]
    assert list((tmp_path / "data" / "exports").glob("*.zip")) == []
