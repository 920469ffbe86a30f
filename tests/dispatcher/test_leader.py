"""Tests for dispatcher/leader.py: one leader among processes (PostgreSQL), this process alone on SQLite."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from dispatcher.leader import Leadership
from store.locks import AdvisoryLocks, LocalLocks


async def until(check, within: float = 10.0) -> None:
    """Wait until ``check()`` is true (it polls: the state it watches changes in another "process")."""
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.05)


def recorder(name: str, log: list[str]):
    async def duty() -> None:
        log.append(name)

    return duty


async def test_a_lone_process_leads_at_once_and_steps_down_when_stopping():
    log: list[str] = []
    lead = Leadership(LocalLocks(), interval=0.05)
    lead.on_elected.append(recorder("elected", log))
    lead.on_deposed.append(recorder("deposed", log))
    await lead.start()
    assert lead.leading and log == ["elected"]
    await asyncio.sleep(0.2)
    assert log == ["elected"]  # a leader is not elected again at every tick
    await lead.stop()
    assert log == ["elected", "deposed"] and not lead.leading


async def test_a_failing_duty_does_not_stop_the_others():
    log: list[str] = []

    async def broken() -> None:
        raise RuntimeError("boom")

    lead = Leadership(LocalLocks(), interval=0.05)
    lead.on_elected += [broken, recorder("second", log)]
    await lead.start()
    assert log == ["second"]
    await lead.stop()


@pytest.fixture
def pg_url(db_url: str) -> str:
    if not db_url.startswith("postgresql"):
        pytest.skip("several processes need PostgreSQL")
    return db_url


async def test_one_of_two_processes_leads_and_the_other_takes_over_when_it_dies(pg_url):
    log: list[str] = []
    locks_a, locks_b = AdvisoryLocks(pg_url), AdvisoryLocks(pg_url)
    a, b = Leadership(locks_a, interval=0.1), Leadership(locks_b, interval=0.1)
    a.on_elected.append(recorder("a", log))
    b.on_elected.append(recorder("b", log))
    try:
        await a.start()
        await b.start()
        await asyncio.sleep(0.3)
        assert (a.leading, b.leading) == (True, False) and log == ["a"]
        await locks_a.close()  # a dies (its connection goes, and with it the lock)
        await until(lambda: b.leading)
        assert log == ["a", "b"]
    finally:
        for lead in (a, b):
            await lead.stop()
        await locks_a.close()
        await locks_b.close()


async def test_a_leader_that_loses_its_connection_steps_down(pg_url):
    log: list[str] = []
    locks, other = AdvisoryLocks(pg_url), AdvisoryLocks(pg_url)
    lead = Leadership(locks, interval=0.1)
    lead.on_deposed.append(recorder("deposed", log))
    try:
        await lead.start()
        assert lead.leading
        pid = await locks.backend_pid()
        await (await other._connection()).execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        await until(lambda: "deposed" in log)
        await until(lambda: lead.leading)  # and it is elected again once it reconnects (nobody else leads)
    finally:
        await lead.stop()
        await locks.close()
        await other.close()
