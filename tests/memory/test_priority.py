"""Searches before indexing (memory/priority.py): an indexer's next batch waits while a search runs."""

from __future__ import annotations

import asyncio

from memory.priority import SearchFirst


async def test_an_indexer_waits_for_running_searches_and_not_without_them() -> None:
    gate = SearchFirst()
    await asyncio.wait_for(gate.wait_turn(), 1)  # no search: at once
    order: list[str] = []
    release = asyncio.Event()

    async def search(name: str) -> None:
        async with gate.searching():
            await release.wait()
            order.append(name)

    searches = [asyncio.create_task(search(f"search {i}")) for i in range(2)]
    await asyncio.sleep(0)
    assert gate.searches == 2

    async def indexer() -> None:
        await gate.wait_turn()
        order.append("batch")

    batch = asyncio.create_task(indexer())
    await asyncio.sleep(0.01)
    assert order == [] and not batch.done()  # held back while the searches run
    release.set()
    await asyncio.gather(*searches, batch)
    assert order == ["search 0", "search 1", "batch"] and gate.searches == 0


async def test_a_stream_of_searches_cannot_starve_the_indexer() -> None:
    gate = SearchFirst()
    held = asyncio.Event()

    async def endless() -> None:
        async with gate.searching():
            await held.wait()

    task = asyncio.create_task(endless())
    await asyncio.sleep(0)
    await asyncio.wait_for(gate.wait_turn(limit=0.01), 1)  # its turn comes after the limit
    held.set()
    await task
