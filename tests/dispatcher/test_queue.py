"""Tests for dispatcher/queue.py and its tickets: a ticket only moves forward (queued, answering, answered),
one run takes it, and the queue alone counts which messages may still append to their session."""

from __future__ import annotations

import asyncio

from core.messages import IncomingMessage
from core.records import SessionInfo
from dispatcher.intake import accept
from dispatcher.queue import Poke, SessionQueue, Stage, Ticket

INFO = SessionInfo(session_id="telegram:5", channel="telegram", chat_id="5", user_id="5")


def item(text: str = "hi") -> Ticket:
    msg = IncomingMessage(channel="telegram", chat_id="5", user_id="5", text=text)
    return Ticket(accept(msg, INFO, text, None), asyncio.Future())


async def test_a_ticket_only_moves_forward_and_one_run_takes_it() -> None:
    queue = SessionQueue(lambda sid, work: asyncio.sleep(0), concurrency=1)
    it = item()
    assert it.stage is Stage.QUEUED
    assert it.take() and it.stage is Stage.ANSWERING
    assert not it.take()  # a second run finds it taken
    queue.turn_finished(it)
    assert it.stage is Stage.ANSWERED
    assert not it.take() and it.stage is Stage.ANSWERED
    skipped = item()
    queue.turn_finished(skipped)  # a turn may end before it was ever taken (a duplicate)
    assert skipped.stage is Stage.ANSWERED and not skipped.take()


async def test_the_queue_finishes_each_ticket_its_worker_ran() -> None:
    async def run(session_id: str, work: Ticket | Poke) -> None:
        raise RuntimeError("whatever became of it")

    queue = SessionQueue(run, concurrency=1)
    it = item()
    queue.enqueue(it)
    assert queue.appending("telegram:5")
    await queue.wait_idle()
    assert it.stage is Stage.ANSWERED and not queue.appending("telegram:5")


async def test_an_item_appends_until_its_turn_is_finished() -> None:
    ran: list[str] = []
    release = asyncio.Event()

    async def run(session_id: str, work: Ticket | Poke) -> None:
        assert isinstance(work, Ticket)
        await release.wait()
        ran.append(work.accepted.text)

    queue = SessionQueue(run, concurrency=4)
    first, second = item("a"), item("b")
    queue.enqueue(first)
    queue.enqueue(second)
    assert queue.appending("telegram:5")
    queue.turn_finished(first)
    assert first.stage is Stage.ANSWERED
    assert queue.appending("telegram:5")  # the second still may append
    queue.turn_finished(first)  # idempotent: it does not release the second's count
    assert queue.appending("telegram:5")
    queue.turn_finished(second)
    assert not queue.appending("telegram:5")
    release.set()
    await queue.wait_idle()
    assert ran == ["a", "b"]


async def test_an_item_the_queue_never_counted_releases_nothing() -> None:
    async def run(session_id: str, work: Ticket | Poke) -> None:
        await asyncio.sleep(0)

    queue = SessionQueue(run, concurrency=1)
    live = item("live")
    queue.enqueue(live)
    read_back = item("from the journal")  # a claimed run's item of another process's message
    queue.turn_finished(read_back)
    assert read_back.stage is Stage.ANSWERED
    assert queue.appending("telegram:5")  # the live one still counts
    queue.enqueue(live)  # queued twice, counted once
    queue.turn_finished(live)
    assert not queue.appending("telegram:5")
    await queue.wait_idle()
