"""Firing reminders: the app's APScheduler job that claims due reminders and hands their text to the outbox.

Every process runs the job (once a second): exactly-once comes from the claim in :mod:`store.reminders`,
not from which process looks, so a process killed mid-minute leaves nothing behind that the others do
not pick up. A claimed reminder is a pending journal row with its reply kept; the dispatcher sends it like
any kept reply (:meth:`dispatcher.dispatcher.Dispatcher.answer_journalled`): on the session's worker, in
order with the session's turns, retried with backoff until the platform takes it, after a crash by crash
resume, with several processes by the process that claims the session.

The text sent is also stored in the session's history as an assistant message (:func:`note_reminder`),
on the session's worker just before it is sent, so the model knows it reminded and a turn in progress is
never split by it. A reminder that fell due while no process ran is sent at the next start, marked late.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from core.messages import IncomingMessage
from core.records import PendingIncoming
from reminders.when import next_due
from store.reminders import Reminder, Reminders

if TYPE_CHECKING:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    from agent.sessions import SessionManager
    from config.settings import Config

logger = logging.getLogger(__name__)

#: The content type of a reminder's journal row (its payload is the message that set it).
REMINDER = "reminder"
#: The key of a journal row's payload ``extra`` that says its text is in the session's history already.
NOTED = "reminder_noted"
#: Seconds between two looks for due reminders.
TICK_SECONDS = 1.0
#: A reminder sent this long after it fell due is marked late (it fell due while no process ran).
LATE_AFTER = timedelta(seconds=60)
JOB_ID = "reminders-due"


def spread(due: list[Reminder]) -> list[Reminder]:
    """The due reminders with their chats in a random order, each chat's own still in due order. Every process
    reads the same due list; walked in the same order, the first process to claim one would be first to each
    next one, and the others would wait on its row locks in turn. A chat's reminders keep their order, so
    two that come late arrive in the order they were due."""
    by_chat: dict[str, list[Reminder]] = {}
    for reminder in due:
        by_chat.setdefault(reminder.session_id, []).append(reminder)
    chats = list(by_chat.values())
    random.shuffle(chats)
    return [reminder for chat in chats for reminder in chat]


def reminder_text(reminder: Reminder, *, late: bool, zone: Any) -> str:
    """What the chat gets: ``⏰ Reminder: …``; in a group, for whom (``⏰ Reminder for Alice: …``); saying when it
    was due if it is late."""
    target = reminder.target or {}
    name = str(target.get("user_name") or "") if target.get("is_group") else ""
    head = f"⏰ Reminder for {name}" if name else "⏰ Reminder"
    if late:
        due = reminder.due_at.astimezone(zone)
        return f"{head} (late: it was due {due:%Y-%m-%d %H:%M} while I was offline): {reminder.text}"
    return f"{head}: {reminder.text}"


def journal_payload(reminder: Reminder, now: datetime) -> dict[str, Any]:
    """The journal row's message: the one that set the reminder (its chat, thread, WeChat context token),
    under an id of its own, with the reminder's content type and no text."""
    target = dict(reminder.target or {})
    channel, _, rest = reminder.session_id.partition(":")
    target.setdefault("channel", channel)
    target.setdefault("chat_id", rest.rsplit(":", 1)[-1] if not rest.startswith("group:") else rest.split(":")[1])
    target.setdefault("user_id", reminder.created_by.partition(":")[2])
    target.update(text="", content_type=REMINDER, time=now.isoformat(), reply_to_text="", reply_to_name="",
                  mentions_bot=False, reply_to_bot=False, is_from_bot=False,
                  message_id=f"reminder-{reminder.id}-{int(reminder.due_at.timestamp())}")
    return IncomingMessage.from_json(target).to_json()


class ReminderFiring:
    """Looks for due reminders every :data:`TICK_SECONDS` on an ``AsyncIOScheduler`` and fires each once."""

    def __init__(self, reminders: Reminders, config: Callable[[], Config], channels: Callable[[], list[str]],
                 deliver: Callable[[PendingIncoming], Awaitable[None]], *, tick: float = TICK_SECONDS,
                 batch: int = 100) -> None:
        self.reminders = reminders
        self.config = config
        #: the channels running here: only their reminders are fired by this process
        self.channels = channels
        self.deliver = deliver
        self.tick_seconds = tick
        self.batch = batch
        self.scheduler: AsyncIOScheduler | None = None
        #: when this process started firing: a reminder due before it fell due while none ran here
        self.started_at = datetime.now(UTC)
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[int] | None = None

    def start(self) -> None:
        """Look now, then every :attr:`tick_seconds` (needs a running loop)."""
        if self.scheduler is not None:
            return
        from apscheduler.schedulers.asyncio import AsyncIOScheduler  # as the cleanup: nothing before "ready" needs it
        from apscheduler.triggers.interval import IntervalTrigger

        self.started_at = datetime.now(UTC)
        self.scheduler = AsyncIOScheduler(timezone=UTC)
        # jitter: the processes' looks drift apart, so the claims of one instant spread over them
        trigger = IntervalTrigger(seconds=self.tick_seconds, timezone=UTC, jitter=self.tick_seconds / 2)
        self.scheduler.add_job(self._scheduled, trigger, id=JOB_ID,
                               name="due reminders", max_instances=1, coalesce=True, misfire_grace_time=None,
                               next_run_time=datetime.now(UTC))
        self.scheduler.start()
        logger.info("reminders: looking for due ones every %.0f s", self.tick_seconds)

    def stop(self) -> None:
        """Stop looking (a fire in progress finishes its transaction; its journal row is sent at the next start)."""
        scheduler, self.scheduler = self.scheduler, None
        if scheduler is not None and scheduler.running:
            scheduler.shutdown(wait=False)
        if self._task is not None and not self._task.done():
            self._task.cancel()  # a claim and its journal row are one transaction: either both are kept (sent at
            # the next start, or by another process) or neither

    async def _scheduled(self) -> None:
        """The job: a look in its own task, unless one is still running (a slow database), so the scheduler
        never counts overlapping runs."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.tick(), name="due reminders")

    async def tick(self, now: datetime | None = None) -> int:
        """Fire every due reminder of the running channels; return how many this process fired."""
        if self._lock.locked():
            return 0
        async with self._lock:
            try:
                return await self._tick(now)
            except Exception as exc:  # noqa: BLE001 - the database is away: the next tick looks again
                logger.warning("reminders: looking for due ones failed (%s: %s)", type(exc).__name__, exc)
                return 0

    async def _tick(self, now: datetime | None) -> int:
        fired = 0
        while True:
            moment = now or datetime.now(UTC)
            due = await self.reminders.due(moment, self.channels(), self.batch)
            for reminder in spread(due):
                fired += await self.fire(reminder, moment)
            if len(due) < self.batch:
                return fired

    async def fire(self, reminder: Reminder, now: datetime) -> bool:
        """Claim one due reminder and hand it to the outbox; False when another process had it."""
        zone = self.config().zone()
        late = reminder.due_at < self.started_at - timedelta(seconds=1) or now - reminder.due_at > LATE_AFTER
        following = next_due(reminder.every, reminder.due_at, now, zone) if reminder.every else None
        payload = journal_payload(reminder, now)
        row = await self.reminders.fire(reminder, now=now, next_due=following, late=late, payload=payload,
                                        reply=reminder_text(reminder, late=late, zone=zone))
        if row is None:
            return False
        logger.info("session %s: reminder %d fired%s%s", reminder.session_id, reminder.id, " late" if late else "",
                    f", next at {following.isoformat(timespec='minutes')}" if following else "")
        await self.deliver(row)
        return True


async def note_reminder(reminders: Reminders, sessions: SessionManager, inbox_id: int, msg: IncomingMessage,
                        session_id: str, text: str) -> None:
    """Store a reminder's text as an assistant message of its session (once: its journal row is marked), and
    add it to the session's context when that is in memory. Runs on the session's worker, between turns."""
    if msg.extra.get(NOTED):
        return
    message = {"role": "assistant", "content": text}
    payload = msg.to_json()
    payload["extra"][NOTED] = True
    try:
        await sessions.note(reminders, session_id, inbox_id, message, payload)
    except Exception:  # noqa: BLE001 - the reminder still goes out; only its line in the history is missing
        logger.exception("session %s: could not store reminder text in the history", session_id)
