"""Tests for dispatcher/db_retry.py: a journal write that failed because the database was away is tried
again with the DATABASE policy (tenacity), and only a database failure is."""

from __future__ import annotations

import asyncio
import logging

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from core.messages import IncomingMessage
from core.records import SessionInfo
from core.retry import DATABASE
from dispatcher.db_retry import DB_RETRIES, DB_RETRY_DELAY, journal_write
from dispatcher.intake import accept
from dispatcher.queue import Ticket

MSG = IncomingMessage(channel="telegram", chat_id="5", user_id="5", text="hi")
INFO = SessionInfo(session_id="telegram:5", channel="telegram", chat_id="5", user_id="5")


def away() -> OperationalError:
    return OperationalError("INSERT INTO inbox ...", {}, ConnectionRefusedError("the database is restarting"))


def item_with(first: BaseException | tuple[int, int]) -> Ticket:
    recorded: asyncio.Future = asyncio.get_running_loop().create_future()
    if isinstance(first, BaseException):
        recorded.set_exception(first)
    else:
        recorded.set_result(first)
    return Ticket(accept(MSG, INFO, "hi", None), recorded)


class Record:
    """The journal write tried again: fails with the queued errors, then returns (inbox id, user seq)."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> tuple[int, int]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return (7, 3)


def test_the_database_policy():
    assert (DB_RETRIES, DB_RETRY_DELAY) == (30, 1.0)
    assert DATABASE.but(first=0.2, cap=0.2).delay(5) == 0.2  # fixed waits, no jitter


async def test_a_write_that_went_through_is_not_repeated():
    record = Record()
    assert await journal_write(item_with((1, 2)), record, 0.01) == (1, 2)
    assert record.calls == 0


async def test_a_write_is_tried_again_while_the_database_is_away(caplog):
    caplog.set_level(logging.WARNING, logger="dispatcher.db_retry")
    record = Record(away(), away())
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await journal_write(item_with(away()), record, 0.05) == (7, 3)
    assert record.calls == 3
    assert loop.time() - started >= 0.15  # three waits of 0.05 s
    assert [r.getMessage()[-5:-1] for r in caplog.records] == ["1/30", "2/30", "3/30"]


async def test_it_gives_up_after_thirty_retries():
    record = Record(*(away() for _ in range(DB_RETRIES)))
    with pytest.raises(OperationalError):
        await journal_write(item_with(away()), record, 0.0)
    assert record.calls == DB_RETRIES


async def test_other_failures_are_not_retried():
    duplicate = IntegrityError("INSERT INTO inbox ...", {}, Exception("UNIQUE constraint failed"))
    record = Record()
    with pytest.raises(IntegrityError):
        await journal_write(item_with(duplicate), record, 0.0)
    assert record.calls == 0
    record = Record(ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):
        await journal_write(item_with(away()), record, 0.0)
    assert record.calls == 1
