"""The summary jobs repository: the ``summary_jobs`` table (DESIGN §1.3, §4).

A summary is journalled as a job before it runs, so a crash cannot lose it: a start (or, with several
processes, any process) runs the jobs left pending (summaries/summarizer.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from core.records import SummaryJob
from store.engine import Runner
from store.models import SummaryJobRow, utcnow

_JOBS = SummaryJobRow.__table__
_J = _JOBS.c


def _execute(conn: Connection, stmt: Any) -> None:
    conn.execute(stmt)


def _scalar(conn: Connection, stmt: Any) -> Any:
    return conn.execute(stmt).scalar()


def _rows(conn: Connection, stmt: Any) -> list[Any]:
    return list(conn.execute(stmt).all())


class SummaryJobs:
    """Summary jobs: journalled, attempted, finished."""

    def __init__(self, db: Runner) -> None:
        self.db = db

    async def add(self, session_id: str, reason: str, from_seq: int, through_seq: int) -> int:
        """Journal a summary job; return its id."""
        return await self.db.run(_scalar, insert(_JOBS).values(
            session_id=session_id, reason=reason, from_seq=from_seq, through_seq=through_seq, status="pending",
            attempts=0, created_at=utcnow()).returning(_J.id))

    async def finish(self, job_id: int) -> None:
        """Mark a summary job done."""
        await self.db.run(_execute, update(_JOBS).where(_J.id == job_id).values(status="done"))

    async def count_attempt(self, job_id: int) -> None:
        """Record one more attempt at a job."""
        await self.db.run(_execute, update(_JOBS).where(_J.id == job_id).values(attempts=_J.attempts + 1))

    async def pending(self, before: datetime | None = None) -> list[SummaryJob]:
        """Jobs not finished (journalled before ``before``, when given: a dead process may have left them),
        oldest first."""
        pick = select(_J.id, _J.session_id, _J.reason, _J.from_seq, _J.through_seq, _J.attempts).where(
            _J.status == "pending")
        if before is not None:
            pick = pick.where(_J.created_at < before)
        rows = await self.db.run(_rows, pick.order_by(_J.id))
        return [SummaryJob(*row) for row in rows]

    async def is_pending(self, job_id: int) -> bool:
        """True while the job is not finished (another process may have run it meanwhile)."""
        return await self.db.run(_scalar, select(_J.status).where(_J.id == job_id)) == "pending"
