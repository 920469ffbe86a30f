"""The ``reminders`` table (DESIGN §1.7, §12): add, list, cancel, and fire each due reminder exactly once.

**Exactly once.** Firing is one transaction (:func:`_fire`): a conditional ``UPDATE`` claims the reminder
(``WHERE id = … AND status = 'pending' AND due_at = <the due time read>``), and only when it changed one
row does the same transaction journal the reminder's text as a pending ``inbox`` row with its reply kept,
exactly as a finished turn keeps its answer for the outbox (dispatcher/outbox.py). Two processes that read
the same due reminder race on the ``UPDATE``: PostgreSQL re-checks the condition on the row the winner
committed, so the loser changes nothing and journals nothing. A recurring reminder is claimed by moving
its ``due_at`` to the next time, so the same condition guards it. The inbox row's ``message_id``
(``reminder-<id>-<due epoch>``) is unique per channel, a second guard.

No state lies between claimed and journalled, so a crash cannot lose a claimed reminder: the journal row
is sent by the outbox (retried until the platform takes it), after a restart by crash resume, or, with
several processes, by whichever process sweeps the session. What is left is the outbox's own window: a
crash after the platform accepted the text and before the row is marked done sends it once more.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, insert, or_, select, update
from sqlalchemy.engine import Connection

from core.records import PendingIncoming
from store.engine import Runner
from store.models import InboxRow, MessageRow, ReminderRow, SessionRow, utcnow

logger = logging.getLogger(__name__)

#: Pending reminders one session may have at most.
MAX_PENDING = 50
#: The longest reminder text kept.
MAX_TEXT = 2000

PENDING, SENT, CANCELLED = "pending", "sent", "cancelled"

_R = ReminderRow.__table__
_C = _R.c
_INBOX = InboxRow.__table__
_COLUMNS = (_C.id, _C.session_id, _C.created_by, _C.due_at, _C.every, _C.text, _C.status, _C.sent_at,
            _C.created_at, _C.target, _C.late)
_PENDING_OF = (select(*_COLUMNS).where(_C.session_id == bindparam("sid"), _C.status == PENDING)
               .order_by(_C.due_at, _C.id))


@dataclass(frozen=True, slots=True)
class Reminder:
    """One row of ``reminders``."""

    id: int
    session_id: str
    created_by: str
    due_at: datetime
    every: str | None
    text: str
    status: str
    sent_at: datetime | None
    created_at: datetime
    target: dict[str, Any] | None
    late: bool

    def as_dict(self) -> dict[str, Any]:
        """Plain values (datetimes in ISO 8601, UTC) for an export or a page."""
        out = asdict(self)
        for key in ("due_at", "sent_at", "created_at"):
            if out[key] is not None:
                out[key] = out[key].isoformat()
        out.pop("target")
        return out


class TooManyReminders(Exception):
    """The session has :data:`MAX_PENDING` pending reminders already."""


class CancelRefused(Exception):
    """``/reminders cancel <n>`` cannot be done; the message says why, for the user."""


def _reminder(row: Any) -> Reminder:
    return Reminder(*row)


# --- transaction functions -------------------------------------------------------------------------------
def _add(conn: Connection, values: dict[str, Any], limit: int) -> Reminder:
    count = conn.execute(select(func.count()).select_from(_R).where(
        _C.session_id == values["session_id"], _C.status == PENDING)).scalar() or 0
    if count >= limit:
        raise TooManyReminders(f"this chat has {count} pending reminders, the most it may have; cancel one first "
                               "(/reminders)")
    rid = conn.execute(insert(_R).returning(_C.id), values).scalar_one()
    return _reminder(conn.execute(select(*_COLUMNS).where(_C.id == rid)).one())


def _pending(conn: Connection, session_id: str) -> list[Reminder]:
    return [_reminder(r) for r in conn.execute(_PENDING_OF, {"sid": session_id}).all()]


def _cancel(conn: Connection, session_id: str, n: int, by: str, may_cancel_any: bool) -> Reminder:
    pending = _pending(conn, session_id)
    if not pending:
        raise CancelRefused("There are no pending reminders in this chat.")
    if not 1 <= n <= len(pending):
        raise CancelRefused(f"There is no reminder {n} here; pick a number from 1 to {len(pending)} (/reminders).")
    target = pending[n - 1]
    if target.created_by != by and not may_cancel_any:
        raise CancelRefused(f"Reminder {n} was set by someone else; only they or an admin can cancel it.")
    done = conn.execute(update(_R).where(_C.id == target.id, _C.status == PENDING)
                        .values(status=CANCELLED)).rowcount
    if done != 1:
        raise CancelRefused(f"Reminder {n} has just fired; nothing to cancel.")
    return target


def _due(conn: Connection, now: datetime, channels: list[str], limit: int) -> list[Reminder]:
    stmt = (select(*_COLUMNS).where(_C.status == PENDING, _C.due_at <= now,
                                    or_(*[_C.session_id.like(f"{c}:%") for c in channels]))
            .order_by(_C.due_at, _C.id).limit(limit))
    return [_reminder(r) for r in conn.execute(stmt).all()]


def _fire(conn: Connection, reminder: Reminder, now: datetime, next_due: datetime | None, late: bool,
          channel: str, message_id: str, payload: dict[str, Any], reply: str) -> int | None:
    claim = update(_R).where(_C.id == reminder.id, _C.status == PENDING, _C.due_at == reminder.due_at)
    if next_due is None:
        claim = claim.values(status=SENT, sent_at=now, late=late)
    else:
        claim = claim.values(due_at=next_due, sent_at=now, late=late)
    if conn.execute(claim).rowcount != 1:
        return None  # another process claimed it, or it was cancelled
    return conn.execute(insert(_INBOX).returning(_INBOX.c.id), {
        "channel": channel, "message_id": message_id, "session_id": reminder.session_id, "user_seq": None,
        "payload": payload, "status": "pending", "reply": reply, "created_at": now}).scalar_one()


def _note_in_history(conn: Connection, session_id: str, inbox_id: int, message: dict[str, Any],
                     payload: dict[str, Any]) -> int | None:
    sessions = SessionRow.__table__
    seq = conn.execute(update(sessions).where(sessions.c.session_id == session_id)
                       .values(last_seq=sessions.c.last_seq + 1, last_active=utcnow())
                       .returning(sessions.c.last_seq)).scalar()
    if seq is None:
        return None  # the session is gone (forgotten meanwhile)
    conn.execute(insert(MessageRow.__table__), {"session_id": session_id, "seq": seq, "role": "assistant",
                                                "content": message, "created_at": utcnow()})
    conn.execute(update(_INBOX).where(_INBOX.c.id == inbox_id).values(payload=payload))
    return seq


class Reminders:
    """The reminders of every session, on the conversation store's database."""

    def __init__(self, store: Runner, *, max_pending: int = MAX_PENDING) -> None:
        self.store = store
        self.max_pending = max_pending

    async def add(self, session_id: str, created_by: str, due_at: datetime, text: str, *, every: str | None = None,
                  target: dict[str, Any] | None = None) -> Reminder:
        """Store a pending reminder; raises :class:`TooManyReminders` over the limit."""
        values = {"session_id": session_id, "created_by": created_by, "due_at": due_at, "every": every,
                  "text": text[:MAX_TEXT], "status": PENDING, "sent_at": None, "created_at": utcnow(),
                  "target": target, "late": False}
        return await self.store.run(_add, values, self.max_pending)

    async def pending(self, session_id: str) -> list[Reminder]:
        """The session's pending reminders, soonest first (the numbers of ``/reminders``)."""
        return await self.store.run(_pending, session_id)

    async def cancel(self, session_id: str, n: int, by: str, *, may_cancel_any: bool) -> Reminder:
        """Cancel the session's ``n``-th pending reminder (1-based); raises :class:`CancelRefused`."""
        return await self.store.run(_cancel, session_id, n, by, may_cancel_any)

    async def due(self, now: datetime, channels: list[str], limit: int = 100) -> list[Reminder]:
        """Pending reminders due by ``now`` in sessions of ``channels``, oldest first."""
        if not channels:
            return []
        return await self.store.run(_due, now, channels, limit)

    async def fire(self, reminder: Reminder, *, now: datetime, next_due: datetime | None, late: bool,
                   payload: dict[str, Any], reply: str) -> PendingIncoming | None:
        """Claim ``reminder`` and journal ``reply`` for the outbox in one transaction; the journal row, or None
        when it was claimed elsewhere (or cancelled) first."""
        channel, message_id = payload["channel"], payload["message_id"]
        inbox_id = await self.store.run(_fire, reminder, now, next_due, late, channel, message_id, payload, reply)
        if inbox_id is None:
            return None
        return PendingIncoming(inbox_id, reminder.session_id, None, payload, reply)

    async def note_in_history(self, session_id: str, inbox_id: int, message: dict[str, Any],
                              payload: dict[str, Any]) -> int | None:
        """Store the sent reminder as an assistant message of its session, and mark its journal row so (the new
        ``payload``), in one transaction; the message's seq, or None when the session is gone."""
        return await self.store.run(_note_in_history, session_id, inbox_id, message, payload)

    async def all_pending(self, limit: int = 500) -> list[Reminder]:
        """Pending reminders across sessions, soonest first (the console)."""
        stmt = select(*_COLUMNS).where(_C.status == PENDING).order_by(_C.due_at, _C.id).limit(limit)

        def run(conn: Connection) -> list[Reminder]:
            return [_reminder(r) for r in conn.execute(stmt).all()]

        return await self.store.run(run)


async def session_reminders(store: Runner, session_id: str) -> list[dict[str, Any]]:
    """Every reminder of a session (pending, sent, cancelled) as plain dicts, oldest first: for ``/export``."""
    stmt = select(*_COLUMNS).where(_C.session_id == session_id).order_by(_C.created_at, _C.id)

    def run(conn: Connection) -> list[dict[str, Any]]:
        return [_reminder(r).as_dict() for r in conn.execute(stmt).all()]

    return await store.run(run)
