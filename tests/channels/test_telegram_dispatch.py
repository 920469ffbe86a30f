"""The Telegram channel with the real dispatcher, in one process: the fake Bot API posts webhooks to (or is
polled by) the real TelegramChannel, whose messages go through the real dispatcher into a real database
(SQLite, and PostgreSQL when ``TEST_DATABASE_URL`` is set). Nothing is confirmed to Telegram before it is
journalled, and nothing is marked answered before Telegram accepted the reply."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from agent.loop import Agent
from agent.sessions import LoggingDropSink, SessionManager
from agent.tools.base import ToolRegistry
from channels.telegram.channel import TelegramChannel
from config.settings import Config, ConfigHolder
from core.messages import IncomingMessage
from dispatcher.dispatcher import Dispatcher
from store import engine as backend
from store.store import Store
from tests.channels.test_telegram import free_port
from tests.conftest import _libpq_url
from tests.fakes.fake_llm import FakeLLM
from tests.fakes.telegram_api import FakeTelegramAPI


@pytest.fixture
def api():
    with FakeTelegramAPI() as server:
        yield server


class TelegramBot:
    """The Telegram channel (webhook mode unless told), a dispatcher with the fake model, and a real store."""

    def __init__(self, api: FakeTelegramAPI, db_url: str, tmp_path, *, mode: str = "webhook",
                 intake: bool = True, send_timeout: float | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.config = ConfigHolder(Config(
            data_dir=str(tmp_path), channel_type="telegram", telegram_bot_token=api.token,
            telegram_base_url=api.base_url, telegram_rate_limit=False, telegram_mode=mode,
            telegram_webhook_url=self.url, telegram_webhook_port=self.port))
        self.store = Store(db_url)
        self.llm = FakeLLM()
        self.intake = intake
        self.send_timeout = send_timeout

    async def __aenter__(self) -> TelegramBot:
        await self.store.open()
        sink = LoggingDropSink()
        sessions = SessionManager(self.store, self.config, sink)
        agent = Agent(llm=self.llm, tools=ToolRegistry(), store=self.store, config=self.config, sink=sink)
        self.dispatcher = Dispatcher(config=self.config, store=self.store, agent=agent, sessions=sessions)
        self.dispatcher.db_retry_delay = 0.2
        self.channel = TelegramChannel(self.config(), poll_timeout=1)
        if self.send_timeout is not None:
            self.channel.send_timeout = self.send_timeout
        self.dispatcher.add_channel(self.channel)
        await self.channel.start(intake=self.intake)
        assert self.channel.active and self.channel.receiving is self.intake
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
    async with TelegramBot(api, db_url, tmp_path) as bot:
        assert api.webhook == {"url": bot.url, "secret_token": bot.channel.webhook_secret,
                               "allowed_updates": ["message"]}
        with writes_held(db_url):
            update = api.push_text(31, "keep me", user_id=31)
            await asyncio.sleep(1.0)
            assert api.webhook_deliveries == []  # no 200 while the journal cannot be written
            assert api.sent == []
        await api.wait_for(lambda: api.webhook_deliveries == [200], timeout=15)
        message_id = f"31:{update['message']['message_id']}"
        assert [row[0] for row in await bot.inbox()] == [message_id]
        assert [m["text"] for m in await api.wait_for_sent(1, timeout=15)] == ["echo: keep me"]


async def test_a_forged_post_is_refused(api, db_url, tmp_path, caplog):
    async with TelegramBot(api, db_url, tmp_path) as bot:
        api.webhook["secret_token"] = "forged"
        with caplog.at_level(logging.WARNING):
            api.push_text(32, "let me in", user_id=32)
            await api.wait_for(lambda: api.webhook_deliveries == [403], timeout=15)
        assert await bot.inbox() == []
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
            "telegram: a webhook post without the right secret token was refused"]
        api.webhook["secret_token"] = None  # no header at all
        api.push_text(32, "me neither", user_id=32)
        await api.wait_for(lambda: api.webhook_deliveries == [403, 403], timeout=15)
        assert await bot.inbox() == [] and api.sent == []


async def test_a_database_failure_is_a_500_and_the_redelivery_is_answered_once(api, tmp_path, monkeypatch, caplog):
    # SQLite's write lock held by another program past the busy timeout: the journal write fails as it
    # does when the database is away.
    monkeypatch.setattr(backend, "BUSY_TIMEOUT_MS", 300)
    db_url = f"sqlite:///{tmp_path / 'chatbot.db'}"
    api.webhook_retries, api.webhook_retry_delay = 5, 0.5
    async with TelegramBot(api, db_url, tmp_path) as bot:
        with caplog.at_level(logging.WARNING), writes_held(db_url):
            update = api.push_text(33, "do not lose me", user_id=33)
            await api.wait_for(lambda: api.webhook_deliveries == [500], timeout=15)
        await api.wait_for(lambda: api.webhook_deliveries[-1:] == [200], timeout=10)
        assert [m["text"] for m in await api.wait_for_sent(1, timeout=15)] == ["echo: do not lose me"]
        await bot.dispatcher.wait_idle()
        await asyncio.sleep(0.5)
        assert [m["text"] for m in api.sent] == ["echo: do not lose me"]  # once
        assert await bot.inbox() == [(f"33:{update['message']['message_id']}", "done")]
        assert len(bot.llm.history) == 1
        refused = [r.getMessage() for r in caplog.records if r.name == "channels.telegram.webhook"]
        assert refused == [f"telegram: update {update['update_id']} could not be journalled; "
                           "Telegram will deliver it again"]


async def test_a_malformed_update_is_logged_once_and_answered_200(api, db_url, tmp_path, caplog):
    api.webhook_retries = 3
    async with TelegramBot(api, db_url, tmp_path) as bot:
        with caplog.at_level(logging.WARNING):
            bad = api.push_update({"message": {"message_id": 9, "text": "no date, no chat",
                                               "from": {"id": 4, "is_bot": False, "first_name": "U"}}})
            await api.wait_for(lambda: api.webhook_deliveries == [200], timeout=15)
            after = api.push_text(34, "after", user_id=34)
            await api.wait_for_sent(1, timeout=15)
            await bot.dispatcher.wait_idle()
            await api.wait_for(lambda: len(api.webhook_deliveries) == 2, timeout=15)
            await asyncio.sleep(1.0)  # time for redeliveries (0.2 s apart), if there were any
        assert api.webhook_deliveries == [200, 200]  # the bad one was not delivered again
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, warnings
        assert warnings[0].startswith(f"telegram: update {bad['update_id']} could not be read (")
        assert "no date" not in warnings[0]  # bodies are not logged
        assert await bot.inbox() == [(f"34:{after['message']['message_id']}", "done")]


def test_telegram_webhook_port_in_the_environment_wins_over_the_file(tmp_path):
    from config.settings import load_config

    path = tmp_path / "config.json"
    path.write_text('{"telegram_mode": "webhook", "telegram_webhook_port": 8443}', encoding="utf-8")
    assert load_config(path, environ={"TELEGRAM_WEBHOOK_PORT": "8444"}).telegram_webhook_port == 8444
    assert load_config(path, environ={}).telegram_webhook_port == 8443


# --- polling, started and stopped apart from the channel ------------------------------------------
def get_updates_offsets(api: FakeTelegramAPI) -> list[int]:
    """The ``offset`` of every getUpdates call so far."""
    return [int(params.get("offset") or 0) for method, params in api.calls if method == "getUpdates"]


async def test_a_channel_sends_without_polling_and_polls_once_told(api, db_url, tmp_path):
    async with TelegramBot(api, db_url, tmp_path, mode="polling", intake=False) as bot:
        first = api.push_text(41, "waiting for a leader", user_id=41)
        await asyncio.sleep(0.5)
        assert get_updates_offsets(api) == [] and api.pending_updates == 1
        # it sends all the same (a reply made by this process for a message another one received)
        await bot.channel.send(IncomingMessage(channel="telegram", chat_id="41", user_id="41", text=""), "hi")
        assert [m["text"] for m in api.sent] == ["hi"]
        assert await bot.channel.start_intake() and bot.channel.receiving
        assert await bot.channel.start_intake()  # a second call changes nothing
        await api.wait_for_sent(2, timeout=15)
        assert api.sent[1]["text"] == "echo: waiting for a leader"
        await bot.channel.stop_intake()
        assert not bot.channel.receiving and bot.channel.active
        assert api.pending_updates == 0 and get_updates_offsets(api)[-1] == first["update_id"] + 1
        # stopped: nothing is fetched; sending goes on; polling can start again
        second = api.push_text(41, "while nobody polls", user_id=41)
        await asyncio.sleep(1.5)  # past a poll's timeout: a poll still running would have taken it
        assert api.pending_updates == 1
        assert [row[0] for row in await bot.inbox()] == [f"41:{first['message']['message_id']}"]
        await bot.channel.send(IncomingMessage(channel="telegram", chat_id="41", user_id="41", text=""), "still here")
        assert await bot.channel.start_intake()
        await api.wait_for(lambda: [m["text"] for m in api.sent][-1:] == ["echo: while nobody polls"], timeout=15)
        await bot.dispatcher.wait_idle()
        assert [row[0] for row in await bot.inbox()] == [
            f"41:{first['message']['message_id']}", f"41:{second['message']['message_id']}"]


async def test_stopping_polling_confirms_only_what_is_journalled(api, db_url, tmp_path):
    async with TelegramBot(api, db_url, tmp_path, mode="polling") as bot:
        with writes_held(db_url):
            updates = [api.push_text(42, f"message {n}", user_id=42) for n in range(3)]
            await asyncio.sleep(0.5)  # fetched, handed over, their journal writes waiting for the lock
            stopping = asyncio.create_task(bot.channel.stop_intake())
            await asyncio.sleep(0.5)
            assert not stopping.done()
            assert api.pending_updates == 3  # not confirmed while not journalled
            assert all(offset <= updates[0]["update_id"] for offset in get_updates_offsets(api))
        await asyncio.wait_for(stopping, 10)
        assert api.pending_updates == 0
        assert get_updates_offsets(api)[-1] == updates[-1]["update_id"] + 1
        assert [row[0] for row in await bot.inbox()] == [f"42:{u['message']['message_id']}" for u in updates]


# --- sending ----------------------------------------------------------------------------------
async def test_a_send_that_times_out_is_retried_delivered_once_and_only_then_answered(api, db_url, tmp_path, caplog):
    async with TelegramBot(api, db_url, tmp_path, mode="polling", send_timeout=1.0) as bot:
        # Telegram (or a proxy before it) holds the request past the client's read timeout.
        api.stall_next("sendMessage", 3.0)
        with caplog.at_level(logging.INFO, logger="dispatcher.outbox"):
            update = api.push_text(51, "slow network", user_id=51)
            await api.wait_for(lambda: any(method == "sendMessage" for method, _ in api.calls), timeout=15)
            await asyncio.sleep(1.5)  # the client gave up; the outbox waits before the next try
            assert api.sent == []
            assert await bot.inbox() == [(f"51:{update['message']['message_id']}", "pending")]
            assert list((await bot.store.journal.pending_replies()).values()) == ["echo: slow network"]
            await api.wait_for_sent(1, timeout=15)
            await bot.dispatcher.wait_idle()
        await asyncio.sleep(0.5)
        assert [m["text"] for m in api.sent] == ["echo: slow network"]  # once
        assert [method for method, _ in api.calls].count("sendMessage") == 2
        assert await bot.inbox() == [(f"51:{update['message']['message_id']}", "done")]
        assert len(bot.llm.history) == 1  # sent again, not made again
        messages = [r.getMessage() for r in caplog.records if r.name == "dispatcher.outbox"]
        assert messages[0].startswith("reply to telegram:51 failed (TimedOut: ")
        assert messages[-1] == "reply to telegram:51 delivered after 1 retry"
