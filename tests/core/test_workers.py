"""Tests for core/workers.py: one FIFO worker per key, bounded concurrency, idle drop, drain."""

from __future__ import annotations

import asyncio
import logging

from core.workers import KeyedWorkers


class Recorder:
    """A handler that records the order of items and the most items running at once."""

    def __init__(self, delay: float = 0.01) -> None:
        self.delay = delay
        self.done: list[tuple[str, int]] = []
        self.running = 0
        self.peak = 0
        self.gate: asyncio.Event | None = None

    async def __call__(self, key, item) -> None:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(self.delay)
            if item == -1:
                raise RuntimeError("boom")
            self.done.append((key, item))
        finally:
            self.running -= 1


async def test_items_of_a_key_run_in_order_keys_concurrently_and_idle_keys_are_dropped():
    handler = Recorder()
    workers = KeyedWorkers(handler, name="t")
    for i in range(4):
        workers.submit("a", i)
        workers.submit("b", i)
    assert sorted(workers.keys()) == ["a", "b"] and len(workers) == 2
    assert workers.items("a") == [0, 1, 2, 3] and workers.pending() == 8 and workers.pending("b") == 4
    await workers.wait_idle()
    assert [i for k, i in handler.done if k == "a"] == [0, 1, 2, 3]
    assert [i for k, i in handler.done if k == "b"] == [0, 1, 2, 3]
    assert handler.peak == 2
    assert not workers.busy() and len(workers) == 0 and workers.keys() == []
    workers.submit("a", 9)  # a dropped key gets a new worker
    assert workers.busy("a") and not workers.busy("b")
    await workers.wait_idle()
    assert handler.done[-1] == ("a", 9)


async def test_concurrency_is_bounded():
    handler = Recorder()
    workers = KeyedWorkers(handler, concurrency=3)
    for key in range(10):
        workers.submit(str(key), 0)
    await workers.wait_idle()
    assert handler.peak == 3 and len(handler.done) == 10


async def test_without_hold_slot_the_handler_takes_the_slot_itself():
    inside = 0
    peak = 0

    async def handler(key, item):
        nonlocal inside, peak
        async with workers.slot():
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(0.01)
            inside -= 1
        await asyncio.sleep(0.01)  # outside the bound

    workers = KeyedWorkers(handler, concurrency=2, hold_slot=False)
    for key in range(6):
        workers.submit(key, 0)
    await workers.wait_idle()
    assert peak == 2


async def test_a_failing_item_is_logged_and_the_next_one_runs(caplog):
    handler = Recorder(delay=0)
    workers = KeyedWorkers(handler, name="jobs")
    with caplog.at_level(logging.ERROR):
        for item in (1, -1, 2):
            workers.submit("k", item)
        await workers.wait_idle()
    assert handler.done == [("k", 1), ("k", 2)]
    assert "jobs k: an item failed" in caplog.text


async def test_drain_returns_what_did_not_finish_running_item_first():
    handler = Recorder(delay=0)
    workers = KeyedWorkers(handler)
    workers.submit("fast", 1)
    await workers.drain(1)
    handler.gate = asyncio.Event()  # everything from now on hangs
    for item in (1, 2, 3):
        workers.submit("slow", item)
    workers.submit("other", 7)
    await asyncio.sleep(0)
    assert await workers.drain(0.05) == {"slow": [1, 2, 3], "other": [7]}
    assert not workers.busy() and len(workers) == 0
    assert handler.done == [("fast", 1)]


async def test_drain_with_nothing_to_do_and_a_worker_cancelled_before_it_ran():
    handler = Recorder(delay=0)
    workers = KeyedWorkers(handler)
    assert await workers.drain(0) == {}
    workers.submit("k", 1)  # its task has not started yet
    assert await workers.drain(0) == {"k": [1]}
    assert not workers.busy()


async def test_cancelling_a_wait_for_idle_leaves_the_items_running():
    # Issue 40: the runner cancels its wait for idle workers when a stop is asked (Ctrl-C in the terminal);
    # waiting with gather cancelled the running item with it, the reply being written.
    release = asyncio.Event()
    done: list[str] = []

    async def handle(key, item):
        await release.wait()
        done.append(item)

    workers = KeyedWorkers(handle)
    workers.submit("k", "reply")
    await asyncio.sleep(0)
    waiting = asyncio.create_task(workers.wait_idle())
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert workers.busy()
    release.set()
    assert await workers.drain(5) == {}
    assert done == ["reply"]
