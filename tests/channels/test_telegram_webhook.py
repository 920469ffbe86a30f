"""Webhook mode end to end in one process: the fake Bot API posts updates to the real TelegramChannel's server,
whose messages go through the real dispatcher into a real database (SQLite, and PostgreSQL when
``TEST_DATABASE_URL`` is set)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from agent.loop import Agent
from agent.session import LoggingDropSink, SessionManager
from agent.tools.base import ToolRegistry
from channels.telegram import TelegramChannel
from config import Config, ConfigHolder
from dispatcher.dispatcher import Dispatcher
from memory import backend
from memory.store import ConversationStore
from tests.channels.test_telegram import free_port
from tests.conftest import _libpq_url
from tests.fakes.fake_llm import FakeLLM
from tests.fakes.telegram_api import FakeTelegramAPI


@pytest.fixture
def api():
    with FakeTelegramAPI() as server:
        yield server


class WebhookBot:
    """The Telegram channel in webhook mode, a dispatcher with the fake model, and a real store."""

    def __init__(self, api: FakeTelegramAPI, db_url: str, tmp_path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.config = ConfigHolder(Config(
            data_dir=str(tmp_path), channel_type="telegram", telegram_bot_token=api.token,
            telegram_base_url=api.base_url, telegram_rate_limit=False, telegram_mode="webhook",
            telegram_webhook_url=self.url, telegram_webhook_port=self.port))
        self.store = ConversationStore(db_url)
        self.llm = FakeLLM()

    async def __aenter__(self) -> WebhookBot:
        await self.store.open()
        sink = LoggingDropSink()
        sessions = SessionManager(self.store, self.config, sink)
        agent = Agent(llm=self.llm, tools=ToolRegistry(), store=self.store, config=self.config, sink=sink)
        self.dispatcher = Dispatcher(config=self.config, store=self.store, agent=agent, sessions=sessions)
        self.dispatcher.db_retry_delay = 0.2
        self.channel = TelegramChannel(self.config())
        self.dispatcher.add_channel(self.channel)
        await self.channel.start()
        assert self.channel.receiving
        return self

    async def __aexit__(self, *exc) -> None:
        await self.dispatcher.drain(5)
        await self.channel.stop()
        await self.store.close()

    async def inbox(self) -> list[tuple[str, str]]:
        """The journal: (message id, status) of every row."""
        rows = await self.store.run(lambda conn: conn.execute(
            text("SELECT message_id, status FROM inbox ORDER BY id")).all())
        return [tuple(row) for row in rows]


@contextlib.contextmanager
def writes_held(db_url: str) -> Iterator[None]:
    """Another client holds the database's write lock (SQLite) or the journal table's (PostgreSQL)."""
    if db_url.startswith("sqlite"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    import psycopg

    with psycopg.connect(_libpq_url(db_url.split("?")[0])) as conn:
        schema = db_url.rsplit("search_path%3D", 1)[1]
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute("LOCK TABLE inbox IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.rollback()


async def test_the_message_is_journalled_before_telegram_gets_its_200(api, db_url, tmp_path):
    async with WebhookBot(api, db_url, tmp_path) as bot:
        assert api.webhook == {"url": bot.url, "secret_token": bot.channel.webhook_secret,
                               "allowed_updates": ["message"]}
        with writes_held(db_url):
            update = api.push_text(31, "keep me", user_id=31)
            await asyncio.sleep(1.0)
            assert api.webhook_deliveries == []  # no 200 while the journal cannot be written
            assert api.sent == []
        await api.wait_for(lambda: api.webhook_deliveries == [200])
        message_id = f"31:{update['message']['message_id']}"
        assert [row[0] for row in await bot.inbox()] == [message_id]
        assert [m["text"] for m in await api.wait_for_sent(1)] == ["echo: keep me"]


async def test_a_forged_post_is_refused(api, db_url, tmp_path, caplog):
    async with WebhookBot(api, db_url, tmp_path) as bot:
        api.webhook["secret_token"] = "forged"
        with caplog.at_level(logging.WARNING):
            api.push_text(32, "let me in", user_id=32)
            await api.wait_for(lambda: api.webhook_deliveries == [403])
        assert await bot.inbox() == []
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
            "telegram: a webhook post without the right secret token was refused"]
        api.webhook["secret_token"] = None  # no header at all
        api.push_text(32, "me neither", user_id=32)
        await api.wait_for(lambda: api.webhook_deliveries == [403, 403])
        assert await bot.inbox() == [] and api.sent == []


async def test_a_database_failure_is_a_500_and_the_redelivery_is_answered_once(api, tmp_path, monkeypatch, caplog):
    # SQLite's write lock held by another program past the busy timeout: the journal write fails as it
    # does when the database is away.
    monkeypatch.setattr(backend, "BUSY_TIMEOUT_MS", 300)
    db_url = f"sqlite:///{tmp_path / 'chatbot.db'}"
    api.webhook_retries, api.webhook_retry_delay = 5, 0.5
    async with WebhookBot(api, db_url, tmp_path) as bot:
        with caplog.at_level(logging.WARNING), writes_held(db_url):
            update = api.push_text(33, "do not lose me", user_id=33)
            await api.wait_for(lambda: api.webhook_deliveries == [500])
        await api.wait_for(lambda: api.webhook_deliveries[-1:] == [200], timeout=10)
        assert [m["text"] for m in await api.wait_for_sent(1)] == ["echo: do not lose me"]
        await bot.dispatcher.wait_idle()
        await asyncio.sleep(0.5)
        assert [m["text"] for m in api.sent] == ["echo: do not lose me"]  # once
        assert await bot.inbox() == [(f"33:{update['message']['message_id']}", "done")]
        assert len(bot.llm.history) == 1
        refused = [r.getMessage() for r in caplog.records if r.name == "channels.telegram_webhook"]
        assert refused == [f"telegram: update {update['update_id']} could not be journalled; "
                           "Telegram will deliver it again"]


async def test_a_malformed_update_is_logged_once_and_answered_200(api, db_url, tmp_path, caplog):
    api.webhook_retries = 3
    async with WebhookBot(api, db_url, tmp_path) as bot:
        with caplog.at_level(logging.WARNING):
            bad = api.push_update({"message": {"message_id": 9, "text": "no date, no chat",
                                               "from": {"id": 4, "is_bot": False, "first_name": "U"}}})
            await api.wait_for(lambda: api.webhook_deliveries == [200])
            after = api.push_text(34, "after", user_id=34)
            await api.wait_for_sent(1)
            await bot.dispatcher.wait_idle()
        assert api.webhook_deliveries == [200, 200]  # the bad one was not delivered again
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1
        assert warnings[0].startswith(f"telegram: update {bad['update_id']} could not be read (")
        assert "no date" not in warnings[0]  # bodies are not logged
        assert await bot.inbox() == [(f"34:{after['message']['message_id']}", "done")]
