"""Bad input end to end, on SQLite and PostgreSQL: broken Unicode, NUL bytes, and secrets typed into a chat."""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import create_engine, text

from tests.e2e.test_telegram import sent_to, settings, wait_sent
from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI

SECRET = "sk-proj-THISMUSTNEVERBESTORED0123456789"


@pytest.fixture
def servers():
    with FakeTelegramAPI() as api, FakeOpenAIServer() as llm:
        yield api, llm


def dump_database(db_url: str) -> str:
    """Every row of every table, as text."""
    engine = create_engine(db_url.replace("postgresql://", "postgresql+psycopg://", 1)
                           if db_url.startswith("postgresql://") else db_url)
    out = []
    try:
        with engine.connect() as conn:
            for table in ("sessions", "messages", "inbox", "summary_jobs", "admin_grants"):
                out += [repr(tuple(row)) for row in conn.execute(text(f"SELECT * FROM {table}"))]
    finally:
        engine.dispose()
    return "\n".join(out)


def test_broken_unicode_never_breaks_a_chat(servers, tmp_path, db_url):
    api, llm = servers
    # whole answers: the fake's raw body below is a plain chat completion, not a stream
    bot = BotProcess(tmp_path, **settings(api, llm, db_url=db_url, stream_replies=False)).start()
    try:
        api.push_text(30, "cut emoji \ud83d here", user_id=30)  # a lone surrogate, as JSON can carry it
        assert wait_sent(api, 30, 1) == ["echo: cut emoji \ufffd here"]
        # the model's answer ends in half an emoji
        llm.enqueue_raw(200, json.dumps({
            "id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "half \ud83d"}}]}))
        api.push_text(30, "next", user_id=30)
        assert wait_sent(api, 30, 2)[1] == "half \ufffd"
        api.push_text(30, "and later", user_id=30)
        assert wait_sent(api, 30, 3)[2] == "echo: and later"
        sent = json.dumps(llm.requests[-1]["messages"], ensure_ascii=False)
        sent.encode("utf-8")  # no lone surrogate left in the request
        assert "cut emoji \ufffd here" in sent and "half \ufffd" in sent
    finally:
        assert bot.stop() == 0
    assert "Traceback" not in bot.log()


def test_nul_bytes_in_names_and_text_are_cleaned_not_lost(servers, tmp_path, db_url):
    api, llm = servers
    bot = BotProcess(tmp_path, **settings(api, llm, db_url=db_url, group_name_white_list=["ALL_GROUP"])).start()
    try:
        api.push_text(31, "hello\x00 there", user_id=31, first_name="Ev\x00e")
        assert wait_sent(api, 31, 1) == ["echo: hello there"]
        api.push_text(-3200, "@fake_test_bot hi\x00", user_id=32, first_name="Bo\x00b", chat_type="group",
                      title="Te\x00am")
        assert wait_sent(api, -3200, 1) == ["echo: [Bob] hi"]
    finally:
        assert bot.stop() == 0
    dump = dump_database(db_url)
    assert "'Team'" in dump and "hello there" in dump and "\\x00" not in dump and "\x00" not in dump


def test_a_secret_typed_into_config_is_stored_nowhere(servers, tmp_path, db_url):
    api, llm = servers
    bot = BotProcess(tmp_path, **settings(api, llm, db_url=db_url, admin_users=["telegram:33"])).start()
    try:
        api.push_text(33, f"/config open_ai_api_key {SECRET}", user_id=33)
        wait_sent(api, 33, 1)
        assert "open_ai_api_key" in sent_to(api, 33)[0]
        api.push_text(33, f"/auth {SECRET}", user_id=33)
        wait_sent(api, 33, 2)
        time.sleep(0.3)
    finally:
        assert bot.stop() == 0
    dump = dump_database(db_url)
    assert "/config open_ai_api_key ***" in dump
    assert SECRET not in dump
    for path in tmp_path.rglob("*"):
        if path.is_file():  # the log, memory files, and on SQLite the database file with its WAL
            assert SECRET.encode() not in path.read_bytes(), path


def completion(content, finish_reason="stop", **message):
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "finish_reason": finish_reason,
                                    "message": {"role": "assistant", "content": content, **message}}]})


def test_an_answer_without_text_always_gets_a_reply(servers, tmp_path):
    from agent.loop import EMPTY_REPLY, FILTERED_REPLY, REASONING_ONLY_REPLY

    api, llm = servers
    # whole answers: the fake's raw bodies below are plain chat completions, not streams
    bot = BotProcess(tmp_path, **settings(api, llm, stream_replies=False)).start()
    try:
        llm.enqueue_raw(200, completion(None))
        llm.enqueue_raw(200, completion(""))
        llm.enqueue_raw(200, completion(None, reasoning_content="thinking only"))
        llm.enqueue_raw(200, completion(None, finish_reason="content_filter"))
        for i in range(4):
            api.push_text(34, f"q{i}", user_id=34)
            wait_sent(api, 34, i + 1)
        assert sent_to(api, 34) == [EMPTY_REPLY, EMPTY_REPLY, REASONING_ONLY_REPLY, FILTERED_REPLY]
    finally:
        assert bot.stop() == 0


def test_concurrent_config_commands_leave_a_valid_file_with_every_change(servers, tmp_path):
    api, llm = servers
    admins = [f"telegram:{60 + i}" for i in range(6)]
    bot = BotProcess(tmp_path, **settings(api, llm, admin_users=admins)).start()
    changes = {"agent_max_context_turns": 17, "cleanup_hour": 4, "single_chat_reply_prefix": "bot: ",
               "agent_max_steps": 7, "group_chat_keyword": ["weather"], "conversation_max_age_days": 9}
    try:
        for i, (key, value) in enumerate(changes.items()):  # six sessions, run concurrently
            api.push_text(60 + i, f"/config {key} {json.dumps(value)}", user_id=60 + i)
        for i in range(len(changes)):
            wait_sent(api, 60 + i, 1)
    finally:
        assert bot.stop() == 0
    saved = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    assert {key: saved.get(key) for key in changes} == changes
    assert saved["admin_users"] == admins
