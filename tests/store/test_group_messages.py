"""The group background table through the store, on SQLite and PostgreSQL (the ``store`` fixture)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from core.records import SessionInfo
from store.group_messages import BACKGROUND, TRIGGER, GroupLine
from store.models import GroupMessageRow
from store.sessions import delete_session_history
from store.store import Store

T0 = datetime(2026, 3, 10, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def say(store: Store, chat: str, name: str, text: str, t: float, *, kind: str = BACKGROUND,
              cap: int = 500) -> None:
    await store.groups.add("telegram", chat, name, text, kind, at(t), at(t), cap)


async def rows(store: Store, chat: str | None = None) -> int:
    stmt = select(func.count()).select_from(GroupMessageRow)
    if chat is not None:
        stmt = stmt.where(GroupMessageRow.chat_id == chat)
    return await store.run(lambda conn: conn.execute(stmt).scalar())


async def test_background_since_the_previous_trigger_oldest_first(store: Store) -> None:
    await say(store, "-1", "Alice", "before the first question", 1)
    await say(store, "-1", "", "", 2, kind=TRIGGER)
    await say(store, "-1", "Bob", "plan A", 3)
    await say(store, "-1", "Carol", "plan B", 4)
    await say(store, "-2", "Mallory", "another group", 5)
    await say(store, "-1", "Dave", "after the request", 7)
    got = await store.groups.background("telegram", "-1", at(6), 20)
    assert got == [GroupLine("Bob", "plan A", at(3)), GroupLine("Carol", "plan B", at(4))]
    # The first request of the group sees everything before it.
    assert [g.text for g in await store.groups.background("telegram", "-1", at(1.5), 20)] \
        == ["before the first question"]
    assert [g.text for g in await store.groups.background("telegram", "-1", at(6), 1)] == ["plan B"]
    assert await store.groups.background("telegram", "-1", at(6), 0) == []
    assert await store.groups.background("wechat", "-1", at(6), 20) == []


async def test_each_group_is_capped_to_its_newest_rows(store: Store) -> None:
    for i in range(30):
        await say(store, "-1", "A", f"m{i}", i, cap=10)
    await say(store, "-2", "B", "other", 100, cap=10)
    assert await rows(store, "-1") == 10
    assert [g.text for g in await store.groups.background("telegram", "-1", at(1000), 50)] \
        == [f"m{i}" for i in range(20, 30)]
    assert await rows(store, "-2") == 1


async def test_delete_group_and_old_rows(store: Store) -> None:
    await say(store, "-1", "A", "one", 1)
    await say(store, "-1", "", "", 2, kind=TRIGGER)
    await say(store, "-1", "A", "two", 3)
    await say(store, "-2", "B", "stays", 4)
    assert await store.groups.delete("telegram", "-1") == 2  # messages, not marks
    assert await rows(store, "-1") == 0
    assert await rows(store, "-2") == 1
    await say(store, "-3", "C", "old", 10)
    await say(store, "-3", "C", "new", 20)
    assert await store.groups.delete_old(at(15), batch=1) == 1  # -2's row at 4 s, oldest first
    assert await store.groups.delete_old(at(15), batch=5) == 1
    assert await store.groups.delete_old(at(15), batch=5) == 0
    assert [g.text for g in await store.groups.background("telegram", "-3", at(30), 5)] == ["new"]


async def test_forget_in_a_group_session_deletes_its_background(store: Store) -> None:
    group = SessionInfo(session_id="telegram:group:-1:7", channel="telegram", chat_id="-1", user_id="7",
                        is_group=True, title="Team")
    private = SessionInfo(session_id="telegram:-1", channel="telegram", chat_id="-1", user_id="-1",
                          is_group=False, title="Eve")
    await store.sessions.ensure(group)
    await store.sessions.ensure(private)
    await say(store, "-1", "A", "group talk", 1)
    # A private chat whose id equals a group's (impossible on Telegram, possible elsewhere) takes nothing.
    assert (await store.run(delete_session_history, "telegram:-1")).get("group_messages") is None
    assert await rows(store, "-1") == 1
    report = await store.run(delete_session_history, "telegram:group:-1:7")
    assert report["group_messages"] == 1 and report["sessions"] == 1
    assert await rows(store, "-1") == 0
