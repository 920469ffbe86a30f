"""The outbox end to end: a reply is done only when Telegram accepted it, across failures and restarts."""

from __future__ import annotations

import sqlite3
import time

import pytest

from tests.e2e.test_telegram import sent_to, settings, wait_sent
from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI


@pytest.fixture
def servers():
    with FakeTelegramAPI() as api, FakeOpenAIServer() as llm:
        yield api, llm


def inbox_rows(folder):
    db = sqlite3.connect(folder / "data" / "chatbot.db")
    try:
        return db.execute("SELECT status, reply FROM inbox ORDER BY id").fetchall()
    finally:
        db.close()


def test_a_failed_send_is_retried_until_telegram_accepts_it(servers, tmp_path):
    api, llm = servers
    for _ in range(2):
        api.fail_next("sendMessage", 502, "Bad Gateway")
    api.fail_next("sendMessage", 429, "Too Many Requests: retry after 1", {"retry_after": 1})
    bot = BotProcess(tmp_path, **settings(api, llm)).start()
    try:
        api.push_text(20, "hello through a flaky Telegram", user_id=20)
        assert wait_sent(api, 20, 1, timeout=20) == ["echo: hello through a flaky Telegram"]
        time.sleep(0.5)
        assert sent_to(api, 20) == ["echo: hello through a flaky Telegram"]  # once, and no error reply
        assert len(llm.requests) == 1  # the answer was sent again, not made again
        assert "delivered after 2 retries" in bot.log()  # the 429 waits its retry_after inside the channel
    finally:
        assert bot.stop() == 0
    assert inbox_rows(tmp_path) == [("done", "echo: hello through a flaky Telegram")]


def test_an_unsent_reply_survives_a_crash_and_is_sent_not_made_again(servers, tmp_path):
    api, llm = servers
    for _ in range(3):
        api.fail_next("sendMessage", 502, "Bad Gateway")
    bot = BotProcess(tmp_path, **settings(api, llm)).start()
    api.push_text(21, "remember this answer", user_id=21)
    bot.wait_for_log("failed (NetworkError: Bad Gateway); try 2", timeout=10)
    bot.kill()
    assert sent_to(api, 21) == []
    assert inbox_rows(tmp_path) == [("pending", "echo: remember this answer")]
    requests = len(llm.requests)
    bot.start()
    try:
        assert wait_sent(api, 21, 1, timeout=20) == ["echo: remember this answer"]
        time.sleep(1.0)
        assert sent_to(api, 21) == ["echo: remember this answer"]
        assert len(llm.requests) == requests
    finally:
        assert bot.stop() == 0
    assert inbox_rows(tmp_path) == [("done", "echo: remember this answer")]


def test_a_refused_send_is_not_retried(servers, tmp_path):
    api, llm = servers
    api.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
    bot = BotProcess(tmp_path, **settings(api, llm)).start()
    try:
        api.push_text(22, "bye", user_id=22)
        bot.wait_for_log("refused for good (Forbidden", timeout=10)
        time.sleep(0.5)
        assert sent_to(api, 22) == []
    finally:
        assert bot.stop() == 0
    assert inbox_rows(tmp_path) == [("done", "echo: bye")]
