"""End to end, memory that holds only what people said and finds what is in the files: app.py with the fakes."""

from __future__ import annotations

import time

from tests.e2e.test_app import run_app, write_config
from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI


def inventing_summariser(body):
    """Summaries that quote the user twice: once truly, once with words nobody wrote."""
    from summaries.text import SUMMARY_SYSTEM_PROMPT

    if body["messages"][0]["content"] == SUMMARY_SYSTEM_PROMPT:
        return ("- the user counted messages\nUser: I'm going to the beach.\n"
                '- 用户说：“我明天去北京”\n- The user said "message 2"')
    return None


def test_a_summary_never_puts_words_in_the_users_mouth(tmp_path, openai_server):
    openai_server.responder = inventing_summariser
    openai_server.latency = 0.05
    path = write_config(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key="k",
                        agent_max_context_turns=4, data_dir="data", timezone="UTC")
    proc = run_app(path, "".join(f"message {i}\n" for i in range(1, 9)))
    assert proc.returncode == 0, proc.stderr
    [memory] = list((tmp_path / "data" / "memory" / "terminal_local").glob("????-??-??.md"))
    text = memory.read_text(encoding="utf-8")
    assert "- the user counted messages" in text and '- The user said "message 2"' in text
    assert "beach" not in text and "北京" not in text
    summaries = [r for r in openai_server.requests if not r.get("tools")]
    assert summaries, "the summariser ran"
    log = (tmp_path / "data" / "bot.log").read_text(encoding="utf-8")
    assert "line(s) quoting what no user said dropped" in log


def tool_result(llm: FakeOpenAIServer, name: str) -> str:
    """The result of the latest call of tool ``name``, as the model received it."""
    messages = llm.requests[-1]["messages"]
    ids = {c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []
           if c["function"]["name"] == name}
    return [m["content"] for m in messages if m["role"] == "tool" and m["tool_call_id"] in ids][-1]


def ask(api: FakeTelegramAPI, llm: FakeOpenAIServer, chat: int, text: str, tool: str, args: str, answer: str) -> str:
    """One turn in which the model calls ``tool``; returns the tool's result."""
    llm.enqueue_stream("", tool_calls=[(tool, args)])
    llm.enqueue_stream(answer)
    api.push_text(chat, text, user_id=chat, first_name="Alice")
    deadline = time.monotonic() + 30
    while answer not in api.chat_texts(chat):
        if time.monotonic() > deadline:
            raise TimeoutError(f"chat {chat}: {api.chat_texts(chat)}")
        time.sleep(0.02)
    return tool_result(llm, tool)


def test_memory_search_finds_what_an_operator_appends_and_searches_leave_the_question_out(tmp_path):
    """Default settings (the local embedding model): the bot writes a note, searches, an operator appends a
    note to MEMORY.md while it runs, and the next memory_search finds it; history_search never answers a
    question with the question itself."""
    with FakeTelegramAPI(username="fake_test_bot") as api, FakeOpenAIServer() as llm:
        proc = BotProcess(tmp_path, channel_type="telegram", telegram_bot_token=api.token,
                          telegram_base_url=api.base_url, telegram_rate_limit=False,
                          open_ai_api_base=llm.base_url, open_ai_api_key="test", data_dir="data").start()
        try:
            chat = 5001
            saved = ask(api, llm, chat, "remember that I like green tea and my flowerpot is blue", "memory_write",
                        '{"text": "Alice likes green tea."}', "Saved.")
            assert saved.startswith("Saved to MEMORY.md")
            found = ask(api, llm, chat, "what do I drink?", "memory_search", '{"query": "green tea"}', "Tea.")
            assert "[MEMORY.md] Alice likes green tea." in found
            [notes] = list((tmp_path / "data" / "memory").glob("*/MEMORY.md"))
            with notes.open("a", encoding="utf-8") as f:  # the operator, while the bot runs
                f.write("- The spare key is under the blue flowerpot.\n")
            found = ask(api, llm, chat, "where is the spare key?", "memory_search", '{"query": "spare key"}',
                        "Under the pot.")
            assert found.splitlines()[0] == "[MEMORY.md] The spare key is under the blue flowerpot."
            history = ask(api, llm, chat, "which flowerpot colour did I mention?", "history_search",
                          '{"query": "which flowerpot colour did I mention?"}', "Blue.")
            assert "user: remember that I like green tea and my flowerpot is blue" in history
            assert "user: which flowerpot" not in history
        finally:
            assert proc.stop() == 0
        assert "Traceback" not in proc.log()


def wait_reply(api: FakeTelegramAPI, chat: int, answer: str) -> None:
    deadline = time.monotonic() + 30
    while answer not in api.chat_texts(chat):
        if time.monotonic() > deadline:
            raise TimeoutError(f"chat {chat}: {api.chat_texts(chat)}")
        time.sleep(0.02)


def test_history_search_finds_by_meaning_a_turn_that_shares_no_word_and_not_when_off(tmp_path):
    """Default settings: a reply wakes the turn indexer, which embeds the turn in the background; a later
    history_search for "what is my job?" finds "I work as a nurse …", with which it shares no word. With
    ``memory_embedding_model`` off the same search finds nothing (words only) and nothing is embedded."""
    for model, chat in (("local", 5101), ("", 5102)):
        folder = tmp_path / (model or "off")
        folder.mkdir()
        with FakeTelegramAPI(username="fake_test_bot") as api, FakeOpenAIServer() as llm:
            proc = BotProcess(folder, channel_type="telegram", telegram_bot_token=api.token,
                              telegram_base_url=api.base_url, telegram_rate_limit=False,
                              open_ai_api_base=llm.base_url, open_ai_api_key="test", data_dir="data",
                              memory_embedding_model=model).start()
            try:
                llm.enqueue_stream("Noted.")
                api.push_text(chat, "I work as a nurse at the city hospital", user_id=chat, first_name="Alice")
                wait_reply(api, chat, "Noted.")
                if model:
                    proc.wait_for_log(" messages embedded")
                found = ask(api, llm, chat, "what do I do for a living?", "history_search",
                            '{"query": "what is my job?"}', "A nurse.")
            finally:
                assert proc.stop() == 0
            assert "Traceback" not in proc.log()
        if model:
            assert "user: I work as a nurse at the city hospital" in found.splitlines()[0]
            assert "what do I do for a living" not in found  # never the question being answered
        else:
            assert found == "No messages in this conversation's history match 'what is my job?'."
            assert "history index" not in proc.log()


def seed_backlog(db_path, session_id: str, exchanges: int) -> int:
    """Store ``exchanges`` user messages with answers in another chat before the bot starts (the bot then has
    them all to embed); returns the messages stored."""
    import asyncio

    from core.records import SessionInfo
    from store.store import Store

    async def fill() -> int:
        store = Store(f"sqlite:///{db_path}")
        await store.open()
        try:
            await store.sessions.ensure(SessionInfo(session_id, "telegram", session_id.split(":")[1], "9", True))
            for start in range(0, exchanges, 250):
                await store.sessions.append(session_id, [
                    m for i in range(start, min(start + 250, exchanges))
                    for m in ({"role": "user", "content": f"Bob: day {i} of the harbour repairs, the crane moved "
                                                          f"{i % 17} containers of timber and steel"},
                              {"role": "assistant", "content": f"Noted the crane's work on day {i}."})])
            # summarised long ago: no restore summary is started for it at start (agent/restore_ahead.py), which
            # would take the fake model's queued answers
            await store.sessions.set_summarized_through(session_id, 2 * exchanges)
        finally:
            await store.close()
        return 2 * exchanges

    return asyncio.run(fill())


def test_a_search_during_an_indexing_backlog_answers_from_the_words_within_the_turn(tmp_path):
    """Default settings (the local embedding model), 3,000 stored messages of another chat not embedded yet:
    the first reply wakes the indexer, which starts on that backlog (oldest first). A history_search right
    after finds the message stored a moment ago by its words, and a memory_search answers too, both within
    their turn (no "still working" note), while the backlog is still being embedded."""
    import sqlite3

    from dispatcher.replies import STILL_WORKING_REPLY

    db = tmp_path / "data" / "chatbot.db"
    db.parent.mkdir()
    stored = seed_backlog(db, "telegram:-5300", 1500)
    with FakeTelegramAPI(username="fake_test_bot") as api, FakeOpenAIServer() as llm:
        proc = BotProcess(tmp_path, channel_type="telegram", telegram_bot_token=api.token,
                          telegram_base_url=api.base_url, telegram_rate_limit=False,
                          open_ai_api_base=llm.base_url, open_ai_api_key="test", data_dir="data").start()
        try:
            chat = 5301
            llm.enqueue_stream("Noted.")
            api.push_text(chat, "I keep the spare key under the blue flowerpot", user_id=chat, first_name="Alice")
            wait_reply(api, chat, "Noted.")
            found = ask(api, llm, chat, "where is my spare key?", "history_search",
                        '{"query": "spare key flowerpot"}', "Under the pot.")
            notes = ask(api, llm, chat, "anything saved about keys?", "memory_search", '{"query": "spare key"}',
                        "Nothing saved.")
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                embedded = conn.execute("SELECT count(*) FROM message_vectors").fetchone()[0]
                mine = conn.execute("SELECT count(*) FROM message_vectors WHERE session_id = ?",
                                    (f"telegram:{chat}",)).fetchone()[0]
        finally:
            assert proc.stop() == 0
        texts = api.chat_texts(chat)
    assert embedded < stored and mine == 0  # the backlog was still being embedded: the words found it
    assert found.splitlines()[0].endswith("user: I keep the spare key under the blue flowerpot")
    assert notes == "No memory matches for 'spare key'."
    assert STILL_WORKING_REPLY not in texts
    assert "Traceback" not in proc.log()
