"""Tests for dispatcher/outbox.py: the one layer that retries a reply until the platform takes it.

The real Telegram channel (python-telegram-bot) talks to the fake Bot API server; the outbox runs with its
default policy (core.retry.DELIVERY).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from channels.telegram.channel import TelegramChannel
from core.messages import IncomingMessage
from core.retry import DELIVERY, FLOOD_LIMIT
from dispatcher.outbox import Outbox
from store.journal import Journal
from store.store import Store
from tests.channels.test_telegram import make_config
from tests.fakes.telegram_api import FakeTelegramAPI

TO = IncomingMessage(channel="telegram", chat_id="42", user_id="42", text="hi")


@pytest.fixture
def api():
    with FakeTelegramAPI() as server:
        yield server


@pytest.fixture
async def outbox(api, tmp_path: Path):
    store = Store(f"sqlite:///{tmp_path / 'chatbot.db'}")
    await store.open()
    channel = TelegramChannel(make_config(api, telegram_rate_limit=True))
    await channel.start(intake=False)
    box = Outbox(store, {"telegram": channel}, channel.send)
    assert box.retry == DELIVERY
    yield box
    await channel.stop()
    await store.close()


def send_calls(api: FakeTelegramAPI) -> int:
    return sum(1 for name, _ in api.calls if name == "sendMessage")


async def test_a_failing_send_is_retried_with_backoff_until_it_goes_through(api, outbox, caplog):
    caplog.set_level(logging.INFO, logger="dispatcher.outbox")
    for _ in range(2):
        api.fail_next("sendMessage", 502, "Bad Gateway")
    assert await outbox.send(TO, "hello")
    assert [s["text"] for s in api.sent] == ["hello"]
    assert send_calls(api) == 3
    waits = [float(r.getMessage().rsplit(" in ", 1)[1].removesuffix(" s")) for r in caplog.records
             if "failed (NetworkError: Bad Gateway)" in r.getMessage()]
    assert len(waits) == 2 and 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 2.0  # 1 s doubling, jittered
    assert "reply to telegram:42 delivered after 2 retries" in caplog.text


async def test_a_flood_limit_the_library_could_not_wait_out_is_waited_here(api, outbox, caplog):
    for _ in range(FLOOD_LIMIT.attempts):
        api.fail_next("sendMessage", 429, "Too Many Requests: retry after 1", {"retry_after": 1})
    assert await outbox.send(TO, "hello")
    assert [s["text"] for s in api.sent] == ["hello"]
    # PTB's limiter tried 3 times; the outbox waited the second Telegram asked for and tried once more
    assert send_calls(api) == FLOOD_LIMIT.attempts + 1
    assert "reply to telegram:42 failed (RetryAfter: Flood control exceeded. Retry in 0:00:01); try 2 in 1.0 s" \
        in caplog.text


async def test_a_refused_send_is_not_retried(api, outbox, caplog):
    api.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
    assert not await outbox.send(TO, "hello")
    assert send_calls(api) == 1 and api.sent == []
    assert "refused for good (Forbidden" in caplog.text


async def test_a_stop_cancels_the_retries_and_nothing_is_marked_sent(api, outbox):
    for _ in range(20):
        api.fail_next("sendMessage", 502, "Bad Gateway")
    task = asyncio.create_task(outbox.send(TO, "hello"))
    await api.wait_for(lambda: send_calls(api) >= 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    calls = send_calls(api)
    await asyncio.sleep(1.2)
    assert send_calls(api) == calls and api.sent == []  # no try after the cancellation


class AwayJournal(Journal):
    """A real journal whose database is away for the first ``away`` marks of a message as answered (a PostgreSQL
    restart between the send and the mark)."""

    def __init__(self, store: Store, away: int) -> None:
        super().__init__(store)
        self.away = away

    async def mark_done(self, inbox_ids: int | list[int]) -> None:
        if self.away:
            self.away -= 1
            raise OperationalError("UPDATE inbox", {}, Exception("server closed the connection unexpectedly"))
        await super().mark_done(inbox_ids)


class AwayStore(Store):
    """A real store with an :class:`AwayJournal`."""

    def __init__(self, url: str, away: int) -> None:
        super().__init__(url)
        self.journal = AwayJournal(self, away)


async def test_an_answered_message_is_marked_once_the_database_is_back_not_answered_again(tmp_path, caplog):
    store = AwayStore(f"sqlite:///{tmp_path / 'chatbot.db'}", away=2)
    await store.open()
    try:
        recorded = await store.journal.record_incoming("telegram", "m-1", "telegram:42", TO.to_json(), None, None)
        assert recorded is not None
        inbox_id = recorded[0]
        sent: list[str] = []

        async def send(to: IncomingMessage, text: str) -> None:
            sent.append(text)

        with caplog.at_level(logging.WARNING, logger="dispatcher.outbox"):
            await Outbox(store, {}, send).deliver(inbox_id, TO, "hello")
        assert sent == ["hello"]
        assert store.journal.away == 0 and await store.journal.pending() == []  # marked: a restart sends nothing again
        assert "message 1 was answered; marking it so waits for the database (OperationalError)" in caplog.text
        assert "could not mark" not in caplog.text
    finally:
        await store.close()
