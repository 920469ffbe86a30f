"""store/reminders.py on SQLite and PostgreSQL: add, list, cancel, the limit, and the claim that fires each
due reminder exactly once, even with several stores (processes) racing for it."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from core.records import SessionInfo
from store.models import InboxRow, ReminderRow
from store.reminders import CancelRefused, Reminders, TooManyReminders, session_reminders
from store.sessions import delete_session_history
from store.store import Store

NOW = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)


def payload(session_id: str, rid: int, due: datetime) -> dict:
    channel, _, chat = session_id.partition(":")
    return {"channel": channel, "chat_id": chat, "user_id": chat, "text": "", "message_id": f"reminder-{rid}-"
            f"{int(due.timestamp())}", "time": NOW.isoformat(), "content_type": "reminder", "extra": {}}


async def session(store: Store, sid: str = "telegram:1") -> str:
    channel, _, chat = sid.partition(":")
    await store.sessions.ensure(SessionInfo(sid, channel, chat, chat, False, ""))
    return sid


async def inbox_rows(store: Store) -> list[tuple]:
    table = InboxRow.__table__
    return await store.run(lambda conn: conn.execute(
        select(table.c.session_id, table.c.message_id, table.c.reply, table.c.status).order_by(table.c.id)).all())


async def test_add_list_and_cancel_in_order(store: Store) -> None:
    reminders = Reminders(store)
    sid = await session(store)
    later = await reminders.add(sid, "telegram:1", NOW + timedelta(hours=2), "later")
    sooner = await reminders.add(sid, "telegram:1", NOW + timedelta(hours=1), "sooner", every="daily 13:00")
    assert [r.text for r in await reminders.pending(sid)] == ["sooner", "later"]
    assert sooner.every == "daily 13:00" and later.status == "pending" and later.due_at == NOW + timedelta(hours=2)
    with pytest.raises(CancelRefused, match="^There is no reminder 3 here; pick a number from 1 to 2"):
        await reminders.cancel(sid, 3, "telegram:1", may_cancel_any=False)
    with pytest.raises(CancelRefused, match="set by someone else; only they or an admin"):
        await reminders.cancel(sid, 1, "telegram:2", may_cancel_any=False)
    assert (await reminders.cancel(sid, 1, "telegram:2", may_cancel_any=True)).text == "sooner"
    assert [r.text for r in await reminders.pending(sid)] == ["later"]
    assert [(d["text"], d["status"]) for d in await session_reminders(store, sid)] == [("later", "pending"),
                                                                                       ("sooner", "cancelled")]
    exported = (await session_reminders(store, sid))[0]
    assert exported["due_at"] == (NOW + timedelta(hours=2)).isoformat() and "target" not in exported


async def test_pending_reminders_per_session_are_limited(store: Store) -> None:
    reminders = Reminders(store, max_pending=3)
    sid = await session(store)
    for i in range(3):
        await reminders.add(sid, "telegram:1", NOW + timedelta(minutes=i + 1), f"r{i}")
    with pytest.raises(TooManyReminders, match="this chat has 3 pending reminders, the most it may have"):
        await reminders.add(sid, "telegram:1", NOW + timedelta(minutes=9), "one too many")
    await reminders.add(await session(store, "telegram:2"), "telegram:2", NOW, "another chat is not counted")
    await reminders.cancel(sid, 1, "telegram:1", may_cancel_any=False)
    await reminders.add(sid, "telegram:1", NOW + timedelta(minutes=9), "room again")


async def test_fire_claims_once_and_journals_the_text(store: Store) -> None:
    reminders = Reminders(store)
    sid = await session(store)
    one = await reminders.add(sid, "telegram:1", NOW - timedelta(seconds=1), "call mum")
    daily = await reminders.add(sid, "telegram:1", NOW - timedelta(seconds=1), "pills", every="daily 12:00")
    assert await reminders.due(NOW, ["weixin"]) == []
    assert [r.id for r in await reminders.due(NOW, ["telegram"])] == [one.id, daily.id]
    row = await reminders.fire(one, now=NOW, next_due=None, late=False, payload=payload(sid, one.id, one.due_at),
                               reply="⏰ Reminder: call mum")
    assert row is not None and row.reply == "⏰ Reminder: call mum" and row.user_seq is None
    again = await reminders.fire(one, now=NOW, next_due=None, late=False, payload=payload(sid, one.id, one.due_at),
                                 reply="⏰ Reminder: call mum")
    assert again is None
    tomorrow = NOW + timedelta(days=1)
    assert await reminders.fire(daily, now=NOW, next_due=tomorrow, late=True,
                                payload=payload(sid, daily.id, daily.due_at), reply="⏰ pills") is not None
    # the recurring one stays pending at its next time; the read before the claim is stale now
    assert await reminders.fire(daily, now=NOW, next_due=tomorrow, late=True,
                                payload=payload(sid, daily.id, daily.due_at), reply="⏰ pills") is None
    [pending] = await reminders.pending(sid)
    assert (pending.id, pending.due_at, pending.late, pending.sent_at) == (daily.id, tomorrow, True, NOW)
    assert await reminders.due(NOW + timedelta(hours=1), ["telegram"]) == []
    assert [(r[2], r[3]) for r in await inbox_rows(store)] == [("⏰ Reminder: call mum", "pending"),
                                                               ("⏰ pills", "pending")]


async def test_cancel_and_fire_race_one_wins(store: Store) -> None:
    reminders = Reminders(store)
    sid = await session(store)
    r = await reminders.add(sid, "telegram:1", NOW, "race")
    assert await reminders.fire(r, now=NOW, next_due=None, late=False, payload=payload(sid, r.id, r.due_at),
                                reply="x") is not None
    with pytest.raises(CancelRefused, match="There are no pending reminders"):
        await reminders.cancel(sid, 1, "telegram:1", may_cancel_any=False)


async def test_several_processes_fire_each_reminder_exactly_once(store: Store, db_url: str) -> None:
    """Three stores (three processes' engines) read the same 60 due reminders and all try to fire each."""
    reminders = Reminders(store)
    sids = [await session(store, f"telegram:{i}") for i in range(20)]
    for i in range(60):
        await reminders.add(sids[i % 20], "telegram:1", NOW - timedelta(seconds=i % 7), f"r{i}",
                            every="daily 12:00" if i % 3 == 0 else None)
    others = [Store(db_url, create_tables=False) for _ in range(2)]
    for other in others:
        await other.open()
    try:
        ready = asyncio.Barrier(3)

        async def process(s: Store, seed: int) -> int:
            rs = Reminders(s)
            due = await rs.due(NOW, ["telegram"], limit=100)
            # each in its own order (in the same order, the first to claim one is first to reach the next)
            random.Random(seed).shuffle(due)
            await ready.wait()  # all three hold the same 60 due reminders before any of them fires one
            fired = 0
            for r in due:
                nxt = NOW + timedelta(days=1) if r.every else None
                fired += await rs.fire(r, now=NOW, next_due=nxt, late=False, payload=payload(r.session_id, r.id,
                                                                                             r.due_at),
                                       reply=r.text) is not None
                await asyncio.sleep(0)
            return fired

        counts = await asyncio.gather(*(process(s, n) for n, s in enumerate([store, *others])))
    finally:
        for other in others:
            await other.close()
    assert sum(counts) == 60
    if store.dialect == "postgresql":  # precondition: they raced (SQLite runs each store inline: one process)
        assert sum(c > 0 for c in counts) >= 2, counts
    rows = await inbox_rows(store)
    assert sorted(r[2] for r in rows) == sorted(f"r{i}" for i in range(60))
    assert len({r[1] for r in rows}) == 60


async def test_deleted_with_their_session_by_forget_and_cleanup(store: Store) -> None:
    reminders = Reminders(store)
    old, kept = await session(store, "telegram:1"), await session(store, "telegram:2")
    await reminders.add(old, "telegram:1", NOW + timedelta(days=1), "gone with the session")
    await reminders.add(kept, "telegram:2", NOW + timedelta(days=1), "stays")
    deleted = await store.run(delete_session_history, old)
    assert deleted[ReminderRow.__tablename__] == 1
    assert await reminders.pending(old) == []
    await reminders.add(kept, "telegram:2", NOW + timedelta(days=2), "expires with its session")
    assert await store.sessions.delete_expired(datetime.now(UTC) + timedelta(days=1)) == (1, 0)
    assert await session_reminders(store, kept) == []
