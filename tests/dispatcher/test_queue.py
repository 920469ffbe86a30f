"""Tests for dispatcher/queue.py and the stages of a work item (dispatcher/intake.py): an item only moves
forward (queued, answering, answered), and the queue alone counts which items may still append to their
session."""

from __future__ import annotations

import asyncio

from core.messages import IncomingMessage
from core.records import SessionInfo
from dispatcher.intake import Stage, WorkItem
from dispatcher.queue import Poke, SessionQueue

INFO = SessionInfo(session_id="telegram:5", channel="telegram", chat_id="5", user_id="5")


def item(text: str = "hi") -> WorkItem:
    return WorkItem(IncomingMessage(channel="telegram", chat_id="5", user_id="5", text=text), INFO, text, None)


def test_an_item_only_moves_forward() -> None:
    it = item()
    assert it.stage is Stage.QUEUED
    assert it.advance(Stage.ANSWERING) and it.stage is Stage.ANSWERING
    assert not it.advance(Stage.ANSWERING)  # a second run finds it taken
    assert it.advance(Stage.ANSWERED) and it.stage is Stage.ANSWERED
    assert not it.advance(Stage.ANSWERING) and it.stage is Stage.ANSWERED
    skipped = item()
    assert skipped.advance(Stage.ANSWERED)  # a turn may end before it was ever taken (a duplicate)
    assert not skipped.advance(Stage.ANSWERING)


async def test_an_item_appends_until_its_turn_is_finished() -> None:
    ran: list[str] = []
    release = asyncio.Event()

    async def run(session_id: str, work: WorkItem | Poke) -> None:
        assert isinstance(work, WorkItem)
        await release.wait()
        ran.append(work.text)

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
    async def run(session_id: str, work: WorkItem | Poke) -> None:
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
