"""CleanupJob: the retention rule, batching, and its scheduling on APScheduler."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import time_machine
from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection

from config.settings import Config
from core.records import SessionInfo, StoredMessage
from store.models import MessageRow, SessionRow
from store.retention import DAILY_JOB_ID, STARTUP_JOB_ID, CleanupJob, CleanupStats
from store.store import Store

NOW = datetime(2026, 3, 10, 1, 0, 0, tzinfo=UTC)
MAX_AGE = timedelta(days=30)


def make_config(tmp_path: Path, **changes: Any) -> Config:
    """A config with a 30-day retention, cleanup at 03:00 Shanghai time."""
    values: dict[str, Any] = {"data_dir": str(tmp_path / "data"), "conversation_max_age_days": 30,
                              "cleanup_hour": 3, "timezone": "Asia/Shanghai"}
    values.update(changes)
    return Config(**values)


async def add_session(store: Store, sid: str, at: datetime, n_messages: int = 2) -> None:
    """A session last active at ``at`` with ``n_messages`` messages."""
    with time_machine.travel(at, tick=False):
        await store.sessions.ensure(SessionInfo(sid, "telegram", sid.split(":")[1]))
        await store.sessions.append(sid, [{"role": "user", "content": f"{sid} {i}"} for i in range(n_messages)])


def snapshot(root: Path) -> dict[Path, tuple[bytes, int]]:
    """Every file under ``root`` with its bytes and modification time."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def seed_sessions(conn: Connection, sessions: int, expired: int, per_session: int) -> None:
    """``telegram:0`` .. ``telegram:<sessions - 1>`` with ``per_session`` messages each; the first ``expired``
    idle for 45 days, the others active at ``NOW``."""
    old = NOW - timedelta(days=45)
    conn.execute(insert(SessionRow), [
        {"session_id": f"telegram:{i}", "channel": "telegram", "chat_id": str(i), "created_at": old,
         "last_active": old if i < expired else NOW, "last_seq": per_session} for i in range(sessions)])
    conn.execute(insert(MessageRow), [
        {"session_id": f"telegram:{i}", "seq": seq, "role": "user", "content": {"text": "x"}, "created_at": old}
        for i in range(sessions) for seq in range(1, per_session + 1)])


def counts(stats: CleanupStats) -> tuple[int, int, int, int]:
    """The counters of a run, without its duration."""
    return stats.sessions, stats.messages, stats.inbox, stats.batches


class FakeStore:
    """A retention store that serves ``expired`` sessions in batches and records what happened (its own
    ``sessions``, ``journal`` and ``groups`` repositories)."""

    def __init__(self, expired: int = 0, *, delay: float = 0.0, fail: bool = False) -> None:
        self.expired = expired
        self.delay = delay
        self.fail = fail
        self.events: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.cutoffs: list[datetime] = []
        self.sessions = self.journal = self.groups = self

    async def delete_expired(self, cutoff: datetime, batch: int = 200, max_messages: int = 2000,
                             ) -> tuple[int, int]:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.fail:
                raise RuntimeError("database is gone")
            self.cutoffs.append(cutoff)
            n = min(batch, self.expired)
            self.expired -= n
            self.events.append(f"batch:{n}")
            return n, 3 * n
        finally:
            self.in_flight -= 1

    async def prune(self, cutoff: datetime, batch: int = 1000) -> int:
        self.events.append("inbox")
        return 0

    async def delete_old(self, cutoff: datetime, batch: int = 1000) -> int:
        self.events.append("group")
        return 0


class TestRetention:
    """The retention rule on every backend."""

    async def test_boundary_is_strictly_older_than_max_age(self, store: Store, tmp_path: Path) -> None:
        await add_session(store, "telegram:exact", NOW - MAX_AGE)
        await add_session(store, "telegram:older", NOW - MAX_AGE - timedelta(seconds=1), n_messages=3)
        await add_session(store, "telegram:recent", NOW - timedelta(days=1))
        job = CleanupJob(store, lambda: make_config(tmp_path))
        stats = await job.run_once(now=NOW)
        assert stats.cutoff == NOW - MAX_AGE
        assert counts(stats) == (1, 3, 0, 1)
        assert job.last_stats == stats
        assert await store.sessions.get("telegram:older") is None
        assert await store.sessions.load_messages("telegram:older") == []
        for sid in ("telegram:exact", "telegram:recent"):
            assert await store.sessions.load_messages(sid) == [
                StoredMessage(1, {"role": "user", "content": f"{sid} 0"}),
                StoredMessage(2, {"role": "user", "content": f"{sid} 1"})]
        # one second later the session active exactly 30 days before NOW has expired too
        with time_machine.travel(NOW + timedelta(seconds=1), tick=False):
            stats = await job.run_once()
        assert stats.cutoff == NOW - MAX_AGE + timedelta(seconds=1)
        assert counts(stats) == (1, 2, 0, 1)
        assert await store.sessions.get("telegram:exact") is None
        assert await store.sessions.get("telegram:recent") is not None

    async def test_max_age_comes_from_the_live_config(self, store: Store, tmp_path: Path) -> None:
        await add_session(store, "telegram:1", NOW - timedelta(days=8))
        cfg = {"now": make_config(tmp_path, conversation_max_age_days=10)}
        job = CleanupJob(store, lambda: cfg["now"])
        assert counts(await job.run_once(now=NOW)) == (0, 0, 0, 0)
        cfg["now"] = make_config(tmp_path, conversation_max_age_days=7)
        assert counts(await job.run_once(now=NOW)) == (1, 2, 0, 1)

    async def test_memory_files_are_kept(self, store: Store, tmp_path: Path) -> None:
        cfg = make_config(tmp_path)
        folder = Path(cfg.data_dir) / "memory" / "telegram_1"
        folder.mkdir(parents=True)
        files = {folder / "MEMORY.md": "- 名字：小明\n", folder / "2026-01-01.md": "## 10:00\nnotes\n"}
        for path, body in files.items():
            path.write_text(body, encoding="utf-8")
        before = snapshot(Path(cfg.data_dir))
        assert set(before) == set(files)
        await add_session(store, "telegram:1", NOW - timedelta(days=90))
        stats = await CleanupJob(store, lambda: cfg).run_once(now=NOW)
        assert counts(stats) == (1, 2, 0, 1)
        assert snapshot(Path(cfg.data_dir)) == before

    async def test_batches_delete_everything_expired(self, store: Store, tmp_path: Path) -> None:
        await store.run(seed_sessions, 453, 450, 2)
        job = CleanupJob(store, lambda: make_config(tmp_path), batch_size=200)
        stats = await job.run_once(now=NOW)
        assert counts(stats) == (450, 900, 0, 3)
        assert await store.run(lambda conn: conn.execute(select(func.count()).select_from(SessionRow)).scalar()) == 3
        assert await store.run(lambda conn: conn.execute(select(func.count()).select_from(MessageRow)).scalar()) == 6
        assert counts(await job.run_once(now=NOW)) == (0, 0, 0, 0)

    async def test_message_cap_splits_a_big_session_over_batches(self, store: Store,
                                                                 tmp_path: Path) -> None:
        await store.run(seed_sessions, 3, 2, 7)
        # one batch deletes at most 5 messages: the 14 expired ones take three batches (5 + 5 + 4); the last
        # also deletes both sessions
        assert await store.sessions.delete_expired(NOW - timedelta(days=30), batch=20, max_messages=5) == (0, 5)
        job = CleanupJob(store, lambda: make_config(tmp_path), batch_size=20, max_messages=5)
        stats = await job.run_once(now=NOW)
        assert counts(stats) == (2, 9, 0, 2)
        left = await store.run(lambda conn: conn.execute(select(MessageRow.session_id, func.count())
                                                         .group_by(MessageRow.session_id)).all())
        assert [tuple(r) for r in left] == [("telegram:2", 7)]
        assert await store.sessions.get("telegram:0") is None

    async def test_old_answered_inbox_rows_are_pruned(self, store: Store, tmp_path: Path) -> None:
        await store.sessions.ensure(SessionInfo("telegram:1", "telegram", "1"))
        ids = []
        for name, at in [("a", NOW - timedelta(days=31)), ("b", NOW - timedelta(days=31)), ("c", NOW)]:
            with time_machine.travel(at, tick=False):
                result = await store.journal.record_incoming("telegram", name, "telegram:1", {}, None)
            assert result is not None
            ids.append(result[0])
        for inbox_id in ids[1:]:
            await store.journal.mark_done(inbox_id)
        stats = await CleanupJob(store, lambda: make_config(tmp_path), inbox_batch_size=1).run_once(now=NOW)
        assert counts(stats) == (0, 0, 1, 0)
        assert [p.id for p in await store.journal.pending()] == [ids[0]]  # unanswered rows are kept


class TestCleanupJob:
    """Batching, locking and scheduling, with a fake store."""

    async def test_yields_to_the_loop_between_batches(self, tmp_path: Path) -> None:
        store = FakeStore(expired=5)
        job = CleanupJob(store, lambda: make_config(tmp_path), batch_size=2, inbox_batch_size=10)

        async def ticker() -> None:
            for _ in range(10):
                store.events.append("tick")
                await asyncio.sleep(0)

        run = asyncio.ensure_future(job.run_once(now=NOW))
        await asyncio.gather(run, ticker())
        batches = [i for i, e in enumerate(store.events) if e.startswith("batch")]
        assert [store.events[i] for i in batches] == ["batch:2", "batch:2", "batch:1"]
        for a, b in zip(batches, batches[1:], strict=False):
            assert "tick" in store.events[a + 1:b]
        assert counts(run.result()) == (5, 15, 0, 3)
        assert store.cutoffs == [NOW - MAX_AGE] * 3

    async def test_runs_never_overlap(self, tmp_path: Path) -> None:
        store = FakeStore(expired=3, delay=0.01)
        job = CleanupJob(store, lambda: make_config(tmp_path), batch_size=1)
        first = await job.run_scheduled()
        assert first is not None
        await asyncio.sleep(0.005)
        assert await job.run_scheduled() is None  # a trigger during a run is skipped
        second = await job.run_once(now=NOW)  # a direct call waits for the lock
        stats = first.result()
        assert stats is not None and counts(stats) == (3, 9, 0, 3)
        assert counts(second) == (0, 0, 0, 0)
        assert store.max_in_flight == 1

    async def test_scheduled_failure_is_logged(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        job = CleanupJob(FakeStore(fail=True), lambda: make_config(tmp_path))
        with caplog.at_level(logging.ERROR, logger="store.retention"):
            task = await job.run_scheduled()
            assert task is not None
            assert await task is None
        assert [r.getMessage() for r in caplog.records if r.name == "store.retention"] == ["Cleanup failed"]
        with pytest.raises(RuntimeError, match="database is gone"):
            await job.run_once(now=NOW)

    async def test_startup_run_fires(self, store: Store, tmp_path: Path) -> None:
        await add_session(store, "telegram:1", datetime.now(UTC) - timedelta(days=31))
        await add_session(store, "telegram:2", datetime.now(UTC))
        job = CleanupJob(store, lambda: make_config(tmp_path), startup_delay=0.1)
        job.start()
        try:
            assert job.running
            for _ in range(150):
                if job.last_stats is not None:
                    break
                await asyncio.sleep(0.02)
            assert job.last_stats is not None
            assert counts(job.last_stats) == (1, 2, 0, 1)
            assert job.scheduler is not None
            assert job.scheduler.get_job(STARTUP_JOB_ID) is None  # a one-off: gone after it ran
            assert job.scheduler.get_job(DAILY_JOB_ID) is not None
        finally:
            job.stop()
            await job.wait_stopped()
        assert not job.running
        assert await store.sessions.get("telegram:1") is None
        assert await store.sessions.get("telegram:2") is not None

    async def test_startup_run_is_scheduled_after_the_delay(self, tmp_path: Path) -> None:
        job = CleanupJob(FakeStore(), lambda: make_config(tmp_path))
        before = datetime.now(UTC)
        job.start()
        try:
            assert job.scheduler is not None
            run_at = job.scheduler.get_job(STARTUP_JOB_ID).next_run_time
            assert before + timedelta(seconds=5) <= run_at <= datetime.now(UTC) + timedelta(seconds=5)
        finally:
            job.stop()
            await job.wait_stopped()

    async def test_stop_cancels_pending_runs(self, tmp_path: Path) -> None:
        store = FakeStore(expired=1)
        job = CleanupJob(store, lambda: make_config(tmp_path), startup_delay=0.1)
        job.start()
        job.stop()
        job.stop()  # idempotent
        await job.wait_stopped()
        await asyncio.sleep(0.3)
        assert store.events == []
        assert job.last_stats is None
        assert job.next_run_time() is None

    async def test_stop_ends_a_run_after_its_current_batch(self, tmp_path: Path) -> None:
        store = FakeStore(expired=10_000, delay=0.01)
        job = CleanupJob(store, lambda: make_config(tmp_path), batch_size=1, startup_delay=0.0)
        job.start()
        for _ in range(100):
            if len(store.events) >= 3:
                break
            await asyncio.sleep(0.01)
        job.stop()
        await job.wait_stopped(grace=2.0)
        assert job.last_stats is not None
        assert 3 <= job.last_stats.batches < 100
        assert store.expired == 10_000 - job.last_stats.batches

    async def test_daily_trigger_at_cleanup_hour_in_the_zone(self, tmp_path: Path) -> None:
        cfg = {"now": make_config(tmp_path)}
        job = CleanupJob(FakeStore(), lambda: cfg["now"], startup_delay=60)
        with time_machine.travel(NOW, tick=True):  # 09:00 in Shanghai
            job.start()
            try:
                assert job.next_run_time() == datetime(2026, 3, 11, 3, 0, tzinfo=ZoneInfo("Asia/Shanghai"))
                assert str(job.next_run_time().tzinfo) == "Asia/Shanghai"
                assert job.reschedule() is False  # nothing changed
                cfg["now"] = make_config(tmp_path, cleanup_hour=5, timezone="Europe/Berlin")  # now 02:00 there
                assert job.reschedule() is True
                assert job.next_run_time() == datetime(2026, 3, 10, 5, 0, tzinfo=ZoneInfo("Europe/Berlin"))
                assert job.next_run_time() == datetime(2026, 3, 10, 4, 0, tzinfo=UTC)
            finally:
                job.stop()
                await job.wait_stopped()
        assert job.reschedule() is False  # not running
