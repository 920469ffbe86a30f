"""Crash resume against new intake, on SQLite and PostgreSQL: after kill -9, a session's unanswered
messages are answered once, before the messages that arrived while the bot was down."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import create_engine, text

from tests.e2e.test_telegram import sent_to, settings, wait_sent
from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI


@pytest.fixture
def servers():
    with FakeTelegramAPI() as api, FakeOpenAIServer() as llm:
        yield api, llm


def journalled(db_url: str) -> int:
    engine = create_engine(db_url.replace("postgresql://", "postgresql+psycopg://", 1)
                           if db_url.startswith("postgresql://") else db_url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM inbox")).scalar_one()
    finally:
        engine.dispose()


def test_resumed_messages_come_before_new_ones_and_are_answered_once(servers, tmp_path, db_url):
    api, llm = servers
    bot = BotProcess(tmp_path, **settings(api, llm, db_url=db_url)).start()
    llm.latency = 30  # m0's turn is in flight, m1 and m2 wait behind it, when the process dies
    for i in range(3):
        api.push_text(50, f"m{i}", user_id=50)
    llm.wait_for_requests(1, timeout=10)
    deadline = time.monotonic() + 10
    while journalled(db_url) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    bot.kill()
    api.push_text(50, "m3", user_id=50)  # written while the bot is down: fetched at once by the next start
    llm.latency = 0.2
    bot.start()
    try:
        assert wait_sent(api, 50, 4, timeout=20) == ["echo: m0", "echo: m1", "echo: m2", "echo: m3"]
        time.sleep(1.0)
        assert len(sent_to(api, 50)) == 4
    finally:
        assert bot.stop() == 0
