"""The retention job: deletes idle sessions with their messages, daily and once soon after start.

Group background rows (``group_messages``) older than the same age go too.

A session is expired when ``last_active < now - conversation_max_age_days`` (a session active exactly
that long ago is kept). The work runs in small transactions, off the event loop (the store's
``run_long``), so chats wait for the database at most one batch at a time. Memory files are never
touched: they are the long-term memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Protocol

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger

from store.store import Store
from store.usage import UsageStore

logger = logging.getLogger(__name__)

DAILY_JOB_ID = "cleanup-daily"
STARTUP_JOB_ID = "cleanup-startup"


@dataclass(frozen=True, slots=True)
class CleanupStats:
    """What one cleanup run removed."""

    cutoff: datetime
    sessions: int = 0
    messages: int = 0
    inbox: int = 0
    group_messages: int = 0
    #: image files of deleted sessions (media/files.py)
    images: int = 0
    #: usage rows older than 400 days summed into usage_daily
    usage_rows: int = 0
    batches: int = 0
    duration_ms: float = 0.0


class RetentionSettings(Protocol):
    """The settings the cleanup reads (``config.settings.Config`` has them; the store does not import it)."""

    @property
    def cleanup_hour(self) -> int: ...

    @property
    def conversation_max_age_days(self) -> int: ...

    def zone(self) -> tzinfo | None: ...


class CleanupJob:
    """Runs the retention cleanup on an APScheduler ``AsyncIOScheduler``: daily at ``cleanup_hour``."""

    def __init__(self, store: Store, config_provider: Callable[[], RetentionSettings], *,
                 startup_delay: float = 5.0, batch_size: int = 20, max_messages: int = 1000,
                 inbox_batch_size: int = 1000, usage: UsageStore | None = None,
                 sweep_media: Callable[[], Awaitable[int]] | None = None) -> None:
        self.store = store
        #: usage rows older than 400 days are summed per day (store/usage.py); None: not done
        self.usage = usage
        self.config_provider = config_provider
        self.startup_delay = startup_delay
        self.batch_size = batch_size
        #: messages deleted per transaction at most: on SQLite a batch holds the one write lock every chat needs
        self.max_messages = max_messages
        self.inbox_batch_size = inbox_batch_size
        #: deletes the image folders of sessions that are gone; returns the files deleted (media/sweep.py)
        self.sweep_media = sweep_media
        self.scheduler: AsyncIOScheduler | None = None
        #: the stats of the last finished run, if any
        self.last_stats: CleanupStats | None = None
        self._lock = asyncio.Lock()
        self._stopping = False
        self._task: asyncio.Task[CleanupStats | None] | None = None
        self._schedule: tuple[int, str] | None = None

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self.scheduler is not None and self.scheduler.running

    # --- scheduling ---------------------------------------------------------------------------
    def _daily_trigger(self) -> CronTrigger:
        cfg = self.config_provider()
        zone = cfg.zone()
        self._schedule = (cfg.cleanup_hour, str(zone))
        return CronTrigger(hour=cfg.cleanup_hour, minute=0, second=0, timezone=zone)

    def start(self) -> None:
        """Schedule the daily run and one run ``startup_delay`` seconds from now (needs a running loop)."""
        if self.running:
            return
        self._stopping = False
        self.scheduler = AsyncIOScheduler(timezone=UTC)
        self.scheduler.add_job(self.run_scheduled, self._daily_trigger(), id=DAILY_JOB_ID, name="daily cleanup",
                               max_instances=1, coalesce=True, misfire_grace_time=3600)
        run_at = datetime.now(UTC) + timedelta(seconds=self.startup_delay)
        self.scheduler.add_job(self.run_scheduled, DateTrigger(run_date=run_at), id=STARTUP_JOB_ID,
                               name="startup cleanup", max_instances=1, misfire_grace_time=None)
        self.scheduler.start()
        hour, zone = self._schedule or (0, "")
        logger.info("Cleanup scheduled daily at %02d:00 %s, and in %.1f s", hour, zone, self.startup_delay)

    def reschedule(self) -> bool:
        """Apply a changed ``cleanup_hour`` or ``timezone``; return True when the schedule changed."""
        if not self.running:
            return False
        assert self.scheduler is not None
        before = self._schedule
        trigger = self._daily_trigger()
        if self._schedule == before:
            return False
        self.scheduler.reschedule_job(DAILY_JOB_ID, trigger=trigger)
        hour, zone = self._schedule or (0, "")
        logger.info("Cleanup rescheduled: daily at %02d:00 %s", hour, zone)
        return True

    def next_run_time(self) -> datetime | None:
        """When the daily run fires next, or None when not started."""
        if self.scheduler is None:
            return None
        job = self.scheduler.get_job(DAILY_JOB_ID)
        return job.next_run_time if job else None

    def stop(self) -> None:
        """Stop scheduling; a run in progress ends after its current batch (see :meth:`wait_stopped`).

        Until the next :meth:`start`, :meth:`run_once` returns at once without deleting anything.
        """
        self._stopping = True
        if self.scheduler is not None and self.scheduler.running:
            # wait=False: the asyncio executor cannot wait anyway. A run in progress is our own task
            # (see run_scheduled); it sees the stop flag and ends after its current batch.
            self.scheduler.shutdown(wait=False)
        self.scheduler = None

    async def wait_stopped(self, grace: float = 10.0) -> None:
        """Wait for a run in progress to finish its current batch; cancel it after ``grace`` seconds."""
        await asyncio.sleep(0)  # AsyncIOScheduler.shutdown() takes effect on the next loop iteration
        task = self._task
        if task is None or task.done():
            return
        try:
            async with asyncio.timeout(grace):  # not wait_for: it can swallow our own cancel
                await asyncio.shield(task)
        except TimeoutError:
            logger.warning("Cleanup did not stop within %.1f s; cancelling it", grace)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # --- running ------------------------------------------------------------------------------
    async def run_scheduled(self) -> asyncio.Task[CleanupStats | None] | None:
        """The scheduled entry point: start a run in the background, unless one is in progress.

        Returns the run's task (it logs a failure instead of raising), or None when skipped. The run is
        not the scheduler's own task, so shutting the scheduler down never cuts a transaction short.
        """
        if self._lock.locked() or (self._task is not None and not self._task.done()):
            logger.info("Cleanup already running; skipping this trigger")
            return None
        task = asyncio.get_running_loop().create_task(self._guarded_run(), name="cleanup")
        self._task = task
        return task

    async def _guarded_run(self) -> CleanupStats | None:
        try:
            return await self.run_once()
        except Exception:
            logger.exception("Cleanup failed")
            return None

    async def run_once(self, now: datetime | None = None) -> CleanupStats:
        """Delete expired sessions (with their messages) and old answered inbox rows, in batches."""
        async with self._lock:
            return await self._run(now)

    async def _run(self, now: datetime | None) -> CleanupStats:
        started = time.perf_counter()
        now = now or datetime.now(UTC)
        if now.tzinfo is None:
            raise ValueError("cleanup needs an aware datetime")
        cutoff = now.astimezone(UTC) - timedelta(days=self.config_provider().conversation_max_age_days)
        sessions = messages = inbox = group = batches = 0
        while not self._stopping:
            batch_started = time.perf_counter()
            n_sessions, n_messages = await self.store.sessions.delete_expired(cutoff, self.batch_size,
                                                                              self.max_messages)
            sessions += n_sessions
            messages += n_messages
            if n_sessions or n_messages:
                batches += 1
            # Let chats run between transactions: at least as long as the batch held the database.
            await asyncio.sleep(time.perf_counter() - batch_started if n_sessions or n_messages else 0)
            if n_sessions < self.batch_size and n_messages < self.max_messages:
                break
        while not self._stopping:
            n_inbox = await self.store.journal.prune(cutoff, self.inbox_batch_size)
            inbox += n_inbox
            await asyncio.sleep(0)
            if n_inbox < self.inbox_batch_size:
                break
        while not self._stopping:  # group background (DESIGN §1.3) received before the cutoff
            n_group = await self.store.groups.delete_old(cutoff, self.inbox_batch_size)
            group += n_group
            await asyncio.sleep(0)
            if n_group < self.inbox_batch_size:
                break
        images = 0
        if self.sweep_media is not None and not self._stopping:
            try:
                images = await self.sweep_media()
            except Exception:  # noqa: BLE001 - the rows are gone; the folders are swept at the next run
                logger.exception("Cleanup could not delete the image files of deleted sessions")
        usage = 0
        if self.usage is not None and not self._stopping:  # the bill's rows outlive the conversations: 400 days
            usage = await self.usage.roll_up(self.config_provider().zone(), now)
        stats = CleanupStats(cutoff=cutoff, sessions=sessions, messages=messages, inbox=inbox, group_messages=group,
                             images=images, batches=batches, duration_ms=(time.perf_counter() - started) * 1000,
                             usage_rows=usage)
        self.last_stats = stats
        logger.info("Cleanup removed %d sessions, %d messages, %d inbox rows, %d group background rows and %d "
                    "image files older than %s, summed %d usage rows per day, in %.0f ms", sessions, messages,
                    inbox, group, images, cutoff.isoformat(timespec="seconds"), usage, stats.duration_ms)
        return stats
