"""Restart end to end: SIGTERM and kill -9, restored turns, crash resume exactly once, dedup across restarts."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.e2e.test_telegram import settings, wait_sent
from tests.fakes.bot_process import ROOT, BotProcess, clean_env
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI


@pytest.fixture
def servers():
    with FakeTelegramAPI() as api, FakeOpenAIServer() as llm:
        yield api, llm


def user_texts(body):
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def test_restart_after_sigterm_restores_turns(servers, tmp_path):
    api, llm = servers
    bot = BotProcess(tmp_path, **settings(api, llm)).start()
    api.push_text(10, "my name is Ada", user_id=10)
    wait_sent(api, 10, 1)
    api.push_text(10, "I like tea", user_id=10)
    wait_sent(api, 10, 2)
    assert bot.stop() == 0
    bot.start()
    try:
        api.push_text(10, "what do I like?", user_id=10)
        wait_sent(api, 10, 3)
        body = llm.requests[-1]
        assert user_texts(body) == ["my name is Ada", "I like tea", "what do I like?"]
        assert [m["content"] for m in body["messages"] if m["role"] == "assistant"] == \
            ["echo: my name is Ada", "echo: I like tea"]
    finally:
        assert bot.stop() == 0


def test_kill_9_mid_turn_is_answered_exactly_once_after_restart(servers, tmp_path):
    api, llm = servers
    bot = BotProcess(tmp_path, **settings(api, llm)).start()
    api.push_text(11, "first", user_id=11)
    wait_sent(api, 11, 1)
    llm.latency = 30  # the model is slow: the turn is in flight when the process dies
    api.push_text(11, "are you still there?", user_id=11)
    llm.wait_for_requests(2, timeout=10)
    bot.kill()
    llm.latency = 0
    requests_before = len(llm.requests)
    bot.start()
    try:
        # answered soon after the start, without the user writing again
        assert wait_sent(api, 11, 2, timeout=15) == ["echo: first", "echo: are you still there?"]
        time.sleep(1.0)
        assert len([m for m in api.sent if m["chat_id"] in (11, "11")]) == 2
        # Telegram redelivered the unacknowledged update: deduplicated, the model was asked once more only
        assert len(llm.requests) == requests_before + 1
        assert user_texts(llm.requests[-1]) == ["first", "are you still there?"]
    finally:
        assert bot.stop() == 0
    db = sqlite3.connect(tmp_path / "data" / "chatbot.db")
    try:
        rows = db.execute("SELECT role, json_extract(content, '$.content') FROM messages "
                          "WHERE session_id = 'telegram:11' ORDER BY seq").fetchall()
        pending = db.execute("SELECT count(*) FROM inbox WHERE status = 'pending'").fetchone()[0]
    finally:
        db.close()
    assert rows == [("user", "first"), ("assistant", "echo: first"), ("user", "are you still there?"),
                    ("assistant", "echo: are you still there?")]
    assert pending == 0


def test_sigterm_lets_an_in_flight_turn_finish(servers, tmp_path):
    api, llm = servers
    bot = BotProcess(tmp_path, **settings(api, llm)).start()
    llm.latency = 1.5
    api.push_text(12, "slow one", user_id=12)
    llm.wait_for_requests(1, timeout=10)
    assert bot.stop() == 0
    assert [m["text"] for m in api.sent if m["chat_id"] in (12, "12")] == ["echo: slow one"]
    llm.latency = 0
    bot.start()
    try:
        time.sleep(1.5)
        assert [m["text"] for m in api.sent if m["chat_id"] in (12, "12")] == ["echo: slow one"]
    finally:
        assert bot.stop() == 0


def test_restore_summaries_start_at_start_up_so_the_first_reply_does_not_wait(servers, tmp_path):
    # Issue 40: the first reply after a restart waited 5-10 s for the restore summary (DESIGN §4).
    api, llm = servers
    bot = BotProcess(tmp_path, **settings(api, llm)).start()
    for i in range(6):  # three more turns than a restart restores (max(3, 20 // 6)): they need a summary
        api.push_text(10, f"fact number {i}", user_id=10)
        wait_sent(api, 10, i + 1)
    assert bot.stop() == 0
    answered = len(llm.requests)
    bot.start()
    try:
        # before anyone writes: the session is restored and its restore summary written in the background
        bot.wait_for_log("restored 1 recent session(s) ahead of their first message")
        bot.wait_for_log("session telegram:10 restore seqs 1-6: 3 turns, summarised")
        (summary_request,) = llm.requests[answered:]
        assert "fact number 2" in str(summary_request["messages"]) and "tools" not in summary_request
        api.push_text(10, "which facts do you know?", user_id=10)
        wait_sent(api, 10, 7)
        assert "for the summary of the restored history" not in bot.log()  # the first reply did not wait
        reply_request = llm.requests[-1]
        assert user_texts(reply_request)[-1].endswith("which facts do you know?")
        assert "fact number 0" in str(reply_request["messages"])  # the skipped turns, in the summary
    finally:
        assert bot.stop() == 0


def reply_to(params: dict) -> int | None:
    """The message a sendMessage answers (reply_parameters, sent as JSON text or an object)."""
    value = params.get("reply_parameters")
    if isinstance(value, str):
        value = json.loads(value)
    return value.get("message_id") if value else None


def test_a_resumed_answer_on_telegram_replies_to_its_question(servers, tmp_path):
    # Issue 40: a resumed answer appeared with no question above it.
    api, llm = servers
    bot = BotProcess(tmp_path, **settings(api, llm)).start()
    api.push_text(12, "first", user_id=12)
    wait_sent(api, 12, 1)
    llm.latency = 30  # the turn is in flight when the process dies
    api.push_text(12, "are you still there?", user_id=12, message_id=4242)
    llm.wait_for_requests(2, timeout=10)
    bot.kill()
    llm.latency = 0
    bot.start()
    try:
        assert wait_sent(api, 12, 2, timeout=15) == ["echo: first", "echo: are you still there?"]
    finally:
        assert bot.stop() == 0
    first, resumed = [m for m in api.sent if m["chat_id"] in (12, "12")]
    assert reply_to(first["params"]) is None  # a live answer in a private chat needs no pointer
    assert reply_to(resumed["params"]) == 4242  # the resumed one answers its question


def test_a_resumed_answer_in_the_terminal_quotes_its_question(tmp_path):
    # Issue 40: on a channel without reply threading the question is quoted above the answer.
    with FakeOpenAIServer() as llm:
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"open_ai_api_base": llm.base_url, "open_ai_api_key": "k", "data_dir": "data",
                                      "web_console_port": 0}))
        command = [sys.executable, str(ROOT / "app.py"), "--config", str(config)]
        llm.latency = 30  # the turn is in flight when the process dies
        first = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True, cwd=tmp_path, env=clean_env())
        try:
            first.stdin.write("what is the capital of France?\n")
            first.stdin.flush()
            llm.wait_for_requests(1, timeout=30)
        finally:
            first.kill()
            first.communicate(timeout=30)
        llm.latency = 0
        again = subprocess.run(command, input="", capture_output=True, text=True, timeout=60, cwd=tmp_path,
                               env=clean_env())
    assert again.returncode == 0, again.stderr
    assert again.stdout == "> what is the capital of France?\n\necho: what is the capital of France?\n"
