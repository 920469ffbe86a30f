"""Store: one test class, run on SQLite and on PostgreSQL (the ``store`` fixture)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import time_machine
from sqlalchemy import func, select
from sqlalchemy.exc import NoResultFound, StatementError

from core.records import PendingIncoming, SessionInfo, StoredMessage, SummaryJob
from store.models import InboxRow, MessageRow, SessionRow, SummaryJobRow
from store.store import Store

T0 = datetime(2026, 3, 10, 12, 0, 0, 123456, tzinfo=UTC)


def info(session_id: str = "telegram:1", title: str = "Alice") -> SessionInfo:
    """A private-chat session."""
    return SessionInfo(session_id=session_id, channel="telegram", chat_id=session_id.split(":", 1)[1],
                       user_id="u1", is_group=False, title=title)


def user(text_: str) -> dict[str, Any]:
    """A user message."""
    return {"role": "user", "content": text_}


async def scalar(store: Store, stmt) -> Any:
    """Run one statement on the store's engine and return its scalar."""
    return await store.run(lambda conn: conn.execute(stmt).scalar())


async def seqs(store: Store, session_id: str) -> list[int]:
    """Every seq stored for a session."""
    return [m.seq for m in await store.sessions.load_messages(session_id)]


class TestStore:
    """Every Store method, on every backend."""

    # --- sessions ---------------------------------------------------------------------------
    async def test_ensure_session_creates_with_defaults(self, store: Store) -> None:
        with time_machine.travel(T0, tick=False):
            rec = await store.sessions.ensure(info())
        assert rec.session_id == "telegram:1"
        assert (rec.context_start_seq, rec.summary, rec.summary_turns, rec.summarized_through_seq, rec.last_seq) \
            == (1, None, 0, 0, 0)
        assert rec.last_active == T0
        assert await store.sessions.get("telegram:1") == rec
        row = await scalar(store, select(func.count()).select_from(SessionRow))
        assert row == 1

    async def test_ensure_session_is_idempotent_and_updates_title(self, store: Store) -> None:
        await store.sessions.ensure(info(title="Alice"))
        await store.sessions.append("telegram:1", [user("hi")])
        again = await store.sessions.ensure(info(title="Alice"))
        assert again.last_seq == 1
        await store.sessions.ensure(info(title="Alice B."))
        assert await scalar(store, select(SessionRow.title)) == "Alice B."
        await store.sessions.ensure(info(title=""))  # an unknown title keeps the stored one
        assert await scalar(store, select(SessionRow.title)) == "Alice B."
        assert await scalar(store, select(func.count()).select_from(SessionRow)) == 1
        assert (await store.sessions.get("telegram:1")).last_seq == 1

    async def test_concurrent_ensure_session_creates_one_row(self, store: Store) -> None:
        recs = await asyncio.gather(*(store.sessions.ensure(info()) for _ in range(5)))
        assert {r.session_id for r in recs} == {"telegram:1"}
        assert await scalar(store, select(func.count()).select_from(SessionRow)) == 1

    async def test_get_session_missing_is_none(self, store: Store) -> None:
        assert await store.sessions.get("telegram:404") is None

    async def test_sessions_to_restore_are_recent_and_have_unsummarised_messages(self, store) -> None:
        # agent/restore_ahead.py: the sessions whose first message after a start would wait for a summary
        for sid in ("telegram:1", "telegram:2", "telegram:3", "telegram:4"):
            await store.sessions.ensure(info(sid))
            await store.sessions.append(sid, [user(str(i)) for i in range(10)])
        await store.sessions.set_summary("telegram:2", "S", turns=4, through_seq=8)  # 2 left after the summary
        await store.sessions.set_context_start("telegram:3", 9)  # 2 left after the boundary
        since = datetime.now(UTC) - timedelta(days=1)
        found = await store.sessions.to_restore(since, unsummarised=6, limit=10)
        assert sorted(i.session_id for i in found) == ["telegram:1", "telegram:4"]
        assert found[0] in (info("telegram:1"), info("telegram:4"))
        assert len(await store.sessions.to_restore(since, unsummarised=6, limit=1)) == 1
        assert await store.sessions.to_restore(since, unsummarised=10, limit=10) == []
        assert await store.sessions.to_restore(datetime.now(UTC) + timedelta(days=1), unsummarised=0, limit=10) == []

    async def test_set_context_start_keeps_rows(self, store: Store) -> None:
        await store.sessions.ensure(info())
        await store.sessions.append("telegram:1", [user(str(i)) for i in range(5)])
        await store.sessions.set_context_start("telegram:1", 4)
        assert (await store.sessions.get("telegram:1")).context_start_seq == 4
        assert await seqs(store, "telegram:1") == [1, 2, 3, 4, 5]

    async def test_set_summary_and_summarized_through_only_grows(self, store: Store) -> None:
        await store.sessions.ensure(info())
        await store.sessions.set_summary("telegram:1", "S1", turns=3, through_seq=6)
        rec = await store.sessions.get("telegram:1")
        assert (rec.summary, rec.summary_turns, rec.summarized_through_seq) == ("S1", 3, 6)
        await store.sessions.set_summary("telegram:1", "S2", turns=2, through_seq=4)
        rec = await store.sessions.get("telegram:1")
        assert (rec.summary, rec.summary_turns, rec.summarized_through_seq) == ("S2", 2, 6)
        await store.sessions.set_summary("telegram:1", "S3", turns=4)
        rec = await store.sessions.get("telegram:1")
        assert (rec.summary, rec.summary_turns, rec.summarized_through_seq) == ("S3", 4, 6)
        await store.sessions.set_summary("telegram:1", None, turns=5, through_seq=9)
        rec = await store.sessions.get("telegram:1")
        assert (rec.summary, rec.summary_turns, rec.summarized_through_seq) == (None, 0, 9)

    # --- messages ---------------------------------------------------------------------------
    async def test_append_allocates_consecutive_seqs(self, store: Store) -> None:
        with time_machine.travel(T0, tick=False):
            await store.sessions.ensure(info())
        later = T0 + timedelta(minutes=5)
        with time_machine.travel(later, tick=False):
            assert await store.sessions.append("telegram:1", [user("a"), {"role": "assistant",
                                                                          "content": "b"}]) == [1, 2]
        assert await store.sessions.append("telegram:1", [user("c"), user("d"), user("e")]) == [3, 4, 5]
        assert await store.sessions.append("telegram:1", []) == []
        rec = await store.sessions.get("telegram:1")
        assert rec.last_seq == 5
        assert rec.last_active > later
        rows = await store.run(lambda conn: conn.execute(select(MessageRow.seq, MessageRow.role)
                                                         .order_by(MessageRow.seq)).all())
        assert [tuple(r) for r in rows] == [(1, "user"), (2, "assistant"), (3, "user"), (4, "user"), (5, "user")]

    async def test_append_sets_last_active(self, store: Store) -> None:
        with time_machine.travel(T0, tick=False):
            await store.sessions.ensure(info())
        with time_machine.travel(T0 + timedelta(hours=2), tick=False):
            await store.sessions.append("telegram:1", [user("a")])
        assert (await store.sessions.get("telegram:1")).last_active == T0 + timedelta(hours=2)

    async def test_append_to_unknown_session_fails(self, store: Store) -> None:
        with pytest.raises(NoResultFound):
            await store.sessions.append("telegram:404", [user("a")])
        assert await scalar(store, select(func.count()).select_from(MessageRow)) == 0

    async def test_concurrent_appends(self, store: Store) -> None:
        await store.sessions.ensure(info("telegram:1"))
        await store.sessions.ensure(info("telegram:2"))
        jobs = [store.sessions.append(f"telegram:{1 + i % 2}", [user(f"m{i}"), user(f"n{i}")]) for i in range(20)]
        results = await asyncio.gather(*jobs)
        ones = sorted(s for i, r in enumerate(results) if i % 2 == 0 for s in r)
        twos = sorted(s for i, r in enumerate(results) if i % 2 == 1 for s in r)
        assert ones == list(range(1, 21))
        assert twos == list(range(1, 21))
        assert await seqs(store, "telegram:1") == list(range(1, 21))
        assert await seqs(store, "telegram:2") == list(range(1, 21))
        # each append's messages are adjacent
        for r in results:
            assert r[1] == r[0] + 1

    async def test_load_messages_ranges(self, store: Store) -> None:
        await store.sessions.ensure(info("telegram:1"))
        await store.sessions.ensure(info("telegram:2"))
        await store.sessions.append("telegram:1", [user(f"m{i}") for i in range(1, 6)])
        await store.sessions.append("telegram:2", [user("other")])
        every = await store.sessions.load_messages("telegram:1")
        assert every == [StoredMessage(i, user(f"m{i}")) for i in range(1, 6)]
        assert [m.seq for m in await store.sessions.load_messages("telegram:1", 3)] == [3, 4, 5]
        assert [m.seq for m in await store.sessions.load_messages("telegram:1", 2, 4)] == [2, 3, 4]
        assert [m.seq for m in await store.sessions.load_messages("telegram:1", 4, 99)] == [4, 5]
        assert await store.sessions.load_messages("telegram:1", 6) == []
        assert await store.sessions.load_messages("telegram:1", 3, 2) == []
        assert await store.sessions.load_messages("telegram:404") == []

    async def test_load_tail(self, store: Store) -> None:
        await store.sessions.ensure(info())
        await store.sessions.append("telegram:1", [user(f"m{i}") for i in range(1,
                                                                                6)])
        assert await store.sessions.load_tail("telegram:1", 1, 2) == [StoredMessage(4, user("m4")),
                                                                      StoredMessage(5, user("m5"))]
        assert [m.seq for m in await store.sessions.load_tail("telegram:1", 4, 10)] == [4, 5]
        assert [m.seq for m in await store.sessions.load_tail("telegram:1", 1, 5)] == [1, 2, 3, 4, 5]
        assert await store.sessions.load_tail("telegram:1", 1, 0) == []
        assert await store.sessions.load_tail("telegram:1", 6, 3) == []

    async def test_open_session_creates_or_loads_with_its_tail(self, store: Store) -> None:
        record, tail, waiting = await store.sessions.open(info(), limit=3)
        assert (record.session_id, record.last_seq, tail, waiting) == ("telegram:1", 0, [], None)
        await store.sessions.append("telegram:1", [user(f"m{i}") for i in range(1, 6)])
        await store.sessions.set_context_start("telegram:1", 2)
        record, tail, waiting = await store.sessions.open(info(title="Alice B."), limit=3)
        assert (record.context_start_seq, record.last_seq, waiting) == (2, 5, None)
        assert [m.seq for m in tail] == [3, 4, 5]
        _, tail, _ = await store.sessions.open(info(), limit=10)
        assert [m.seq for m in tail] == [2, 3, 4, 5]  # from the context start on
        assert await scalar(store, select(SessionRow.title)) == "Alice"  # the title follows the caller

    async def test_json_round_trip(self, store: Store) -> None:
        await store.sessions.ensure(info())
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "web_fetch", "arguments": '{"url": "https://例え.jp/页面"}'}}],
            "meta": {"nested": [1, 2.5, True, False, None, {"深": ["層", "😀"]}], "empty": {}, "list": []},
        }
        tool = {"role": "tool", "tool_call_id": "call_1", "content": "你好，世界！こんにちは 🌏\n\"quoted\" \\ back"}
        await store.sessions.append("telegram:1", [user("记住：我叫小明"), message, tool])
        loaded = await store.sessions.load_messages("telegram:1")
        assert [m.message for m in loaded] == [user("记住：我叫小明"), message, tool]

    # --- inbox --------------------------------------------------------------------------------
    async def test_record_incoming_stores_the_user_message(self, store: Store) -> None:
        await store.sessions.ensure(info())
        payload = {"text": "你好", "chat_id": "1", "nested": {"a": [1, None]}}
        result = await store.journal.record_incoming("telegram", "m-1", "telegram:1", payload, user("你好"))
        assert result is not None
        inbox_id, seq = result
        assert seq == 1
        assert await store.sessions.load_messages("telegram:1") == [StoredMessage(1, user("你好"))]
        assert await store.journal.pending() == [PendingIncoming(inbox_id, "telegram:1", 1, payload)]

    async def test_record_incoming_duplicate_is_rolled_back(self, store: Store) -> None:
        await store.sessions.ensure(info())
        first = await store.journal.record_incoming("telegram", "m-1", "telegram:1", {"n": 1}, user("once"))
        assert first is not None
        assert await store.journal.record_incoming("telegram", "m-1", "telegram:1", {"n": 2}, user("twice")) is None
        assert await store.sessions.load_messages("telegram:1") == [StoredMessage(1, user("once"))]
        assert (await store.sessions.get("telegram:1")).last_seq == 1  # the duplicate consumed no seq
        assert await store.sessions.append("telegram:1", [user("next")]) == [2]
        # the same message id on another channel is a different message
        other = await store.journal.record_incoming("wechat", "m-1", "telegram:1", {"n": 3}, user("wechat"))
        assert other is not None and other[1] == 3
        assert len(await store.journal.pending()) == 2

    async def test_record_incoming_creates_a_new_session_in_the_same_transaction(self, store: Store,
                                                                                ) -> None:
        result = await store.journal.record_incoming("telegram", "m-1", "telegram:1", {"n": 1}, user("first"),
                                             session=info())
        assert result is not None and result[1] == 1
        record = await store.sessions.get("telegram:1")
        assert record is not None and record.last_seq == 1
        # an existing session is left as it is, and a duplicate is still a duplicate
        again = await store.journal.record_incoming("telegram", "m-2", "telegram:1", {"n": 2}, user("second"),
                                            session=info())
        assert again is not None and again[1] == 2
        assert await store.journal.record_incoming("telegram", "m-2", "telegram:1", {}, user("x"),
                                                   session=info()) is None
        assert [m.seq for m in await store.sessions.load_messages("telegram:1")] == [1, 2]

    async def test_record_incoming_without_user_message(self, store: Store) -> None:
        await store.sessions.ensure(info())
        result = await store.journal.record_incoming("telegram", "cmd-1", "telegram:1", {"text": "/help"}, None)
        assert result is not None and result[1] is None
        assert await store.sessions.load_messages("telegram:1") == []
        assert (await store.sessions.get("telegram:1")).last_seq == 0

    async def test_mark_done_and_pending_incoming(self, store: Store) -> None:
        await store.sessions.ensure(info())
        ids = []
        for i in range(3):
            result = await store.journal.record_incoming("telegram", f"m-{i}", "telegram:1", {"i": i}, user(str(i)))
            assert result is not None
            ids.append(result[0])
        await store.journal.mark_done(ids[1])
        assert await store.journal.pending() == [
            PendingIncoming(ids[0], "telegram:1", 1, {"i": 0}),
            PendingIncoming(ids[2], "telegram:1", 3, {"i": 2}),
        ]
        await store.journal.mark_done(ids[0])
        await store.journal.mark_done(ids[2])
        assert await store.journal.pending() == []
        assert await scalar(store, select(func.count()).select_from(InboxRow)) == 3

    async def test_open_session_names_the_oldest_user_message_still_waiting(self, store: Store) -> None:
        ids = []
        for i in range(3):
            result = await store.journal.record_incoming("telegram", f"m-{i}", "telegram:1", {"i": i}, user(str(i)),
                                                 session=info())
            assert result is not None
            ids.append(result[0])
        await store.journal.record_incoming("telegram", "cmd", "telegram:1", {"text": "/help"}, None)  # no user message
        await store.journal.mark_done(ids[0])
        assert (await store.sessions.open(info(), limit=10)).waiting == 2
        await store.journal.mark_done(ids[1:])
        opened = await store.sessions.open(info(), limit=10)
        assert (opened.waiting, [m.seq for m in opened.tail]) == (None, [1, 2, 3])

    async def test_append_answer_keeps_the_reply_in_the_same_transaction(self, store: Store) -> None:
        result = await store.journal.record_incoming("telegram", "m-1", "telegram:1", {}, user("hi"), session=info())
        assert result is not None
        inbox_id = result[0]
        answer = {"role": "assistant",
                  "content": "hello"}
        assert await store.sessions.append_answer("telegram:1", answer, inbox_id, "hello (cut)") == 2
        assert await store.sessions.load_messages("telegram:1") == [StoredMessage(1, user("hi")),
                                                                    StoredMessage(2, answer)]
        assert await store.journal.pending_replies() == {inbox_id: "hello (cut)"}  # still pending until sent
        with pytest.raises(NoResultFound):  # no session: neither the message nor the reply is written
            await store.sessions.append_answer("telegram:404", answer, inbox_id, "lost")
        assert await store.journal.pending_replies() == {inbox_id: "hello (cut)"}
        await store.journal.mark_done(inbox_id)
        assert await store.journal.pending_replies() == {}

    async def test_prune_inbox_removes_old_answered_rows_in_batches(self, store: Store) -> None:
        await store.sessions.ensure(info())
        old, new = T0 - timedelta(days=40), T0 - timedelta(days=1)
        ids = {}
        for name, at, done in [("old-done-1", old, True), ("old-done-2", old, True), ("old-pending", old, False),
                               ("new-done", new, True), ("edge-done", T0 - timedelta(days=30), True)]:
            with time_machine.travel(at, tick=False):
                result = await store.journal.record_incoming("telegram", name, "telegram:1", {"n": name}, None)
            assert result is not None
            ids[name] = result[0]
            if done:
                await store.journal.mark_done(result[0])
        cutoff = T0 - timedelta(days=30)
        assert await store.journal.prune(cutoff, batch=1) == 1
        assert await store.journal.prune(cutoff, batch=10) == 1
        assert await store.journal.prune(cutoff, batch=10) == 0
        left = (await scalar(store, select(func.count()).select_from(InboxRow)))
        assert left == 3
        assert [p.id for p in await store.journal.pending()] == [ids["old-pending"]]
        # the duplicate check still works for rows that were kept
        assert await store.journal.record_incoming("telegram", "new-done", "telegram:1", {}, None) is None

    # --- summary jobs -------------------------------------------------------------------------
    async def test_summary_jobs(self, store: Store) -> None:
        await store.sessions.ensure(info())
        a = await store.jobs.add("telegram:1", "trim", 1, 10)
        b = await store.jobs.add("telegram:1", "restore", 11, 14)
        assert b > a
        assert await store.jobs.pending() == [SummaryJob(a, "telegram:1", "trim", 1, 10, 0),
                                                      SummaryJob(b, "telegram:1", "restore", 11, 14, 0)]
        await store.jobs.count_attempt(a)
        await store.jobs.count_attempt(a)
        await store.jobs.finish(b)
        assert await store.jobs.pending() == [SummaryJob(a, "telegram:1", "trim", 1, 10, 2)]
        await store.jobs.finish(a)
        assert await store.jobs.pending() == []

    # --- admins -------------------------------------------------------------------------------
    async def test_admin_grants(self, store: Store) -> None:
        assert await store.admins.all() == set()
        await store.admins.grant("telegram:42")
        await store.admins.grant("telegram:42")
        await store.admins.grant("wechat:@abc")
        assert await store.admins.all() == {"telegram:42", "wechat:@abc"}

    # --- retention ----------------------------------------------------------------------------
    async def test_delete_expired_sessions_in_batches(self, store: Store) -> None:
        cutoff = T0 - timedelta(days=30)
        ages = {"telegram:1": cutoff - timedelta(days=3), "telegram:2": cutoff - timedelta(seconds=1),
                "telegram:3": cutoff - timedelta(microseconds=1), "telegram:4": cutoff,
                "telegram:5": T0}
        for sid, at in ages.items():
            with time_machine.travel(at, tick=False):
                await store.sessions.ensure(info(sid))
                await store.sessions.append(sid, [user("q"), {"role": "assistant", "content": "a"}])
                await store.jobs.add(sid, "trim", 1, 2)
        await store.admins.grant("telegram:1")
        assert await store.sessions.delete_expired(cutoff, batch=2) == (2, 4)
        # the oldest go first
        assert await store.sessions.get("telegram:1") is None
        assert await store.sessions.get("telegram:2") is None
        assert await store.sessions.delete_expired(cutoff, batch=2) == (1, 2)
        assert await store.sessions.delete_expired(cutoff, batch=2) == (0, 0)
        left = {sid for sid in ages if await store.sessions.get(sid) is not None}
        assert left == {"telegram:4", "telegram:5"}  # last_active == cutoff is kept
        assert await scalar(store, select(func.count()).select_from(MessageRow)) == 4
        assert {j.session_id for j in await store.jobs.pending()} == left
        assert await scalar(store, select(func.count()).select_from(SummaryJobRow)) == 2
        assert await store.admins.all() == {"telegram:1"}  # grants belong to users, not sessions
        assert await store.sessions.load_messages("telegram:4") == [
            StoredMessage(1, user("q")), StoredMessage(2, {"role": "assistant", "content": "a"})]

    # --- time and backend -----------------------------------------------------------------
    async def test_datetimes_are_aware_utc(self, store: Store) -> None:
        shanghai = timezone(timedelta(hours=8))
        local = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=shanghai)
        with time_machine.travel(local, tick=False):
            rec = await store.sessions.ensure(info())
            await store.sessions.append("telegram:1", [user("x")])
        assert rec.last_active == local
        assert rec.last_active.utcoffset() == timedelta(0)
        assert rec.last_active.isoformat() == "2026-01-01T19:04:05.678901+00:00"
        row = await store.run(lambda conn: conn.execute(select(SessionRow.created_at)).one())
        created = await store.run(lambda conn: conn.execute(select(MessageRow.created_at)).scalar_one())
        assert row.created_at == local and row.created_at.tzinfo is UTC
        assert created == local and created.tzinfo is UTC
        cutoff_naive = datetime(2026, 1, 1)  # noqa: DTZ001 - the store must refuse naive datetimes
        with pytest.raises(StatementError, match="naive datetime"):
            await store.sessions.delete_expired(cutoff_naive)

    async def test_backend_settings(self, store: Store) -> None:
        assert store.engine is not None
        if store.dialect == "sqlite":
            def pragma(name: str) -> Any:
                return store.run(lambda conn: conn.exec_driver_sql(f"PRAGMA {name}").scalar())

            assert await pragma("journal_mode") == "wal"
            assert await pragma("foreign_keys") == 1
            assert await pragma("busy_timeout") == 0  # inline never waits; the worker thread does
            assert await pragma("wal_autocheckpoint") == 0  # checkpoints run in the worker thread
            assert await pragma("synchronous") == 1  # NORMAL
            assert store.engine.pool.size() == 1
        else:
            assert store.dialect == "postgresql"
            assert store.url.startswith("postgresql+psycopg://")
            pool = store.engine.pool
            assert pool.size() == 10
            assert pool._max_overflow == 20
            assert pool._pre_ping is True
            assert pool._recycle == 1800
