"""The admin grants repository: the ``admin_grants`` table (DESIGN §1.3): users made admin through /auth."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from store.engine import Runner
from store.models import AdminGrantRow, utcnow

_GRANTS = AdminGrantRow.__table__


def _execute(conn: Connection, stmt: Any) -> None:
    conn.execute(stmt)


def _scalars(conn: Connection, stmt: Any) -> list[Any]:
    return list(conn.execute(stmt).scalars().all())


class AdminGrants:
    """Every ``<channel>:<user id>`` made admin through /auth."""

    def __init__(self, db: Runner) -> None:
        self.db = db

    async def grant(self, user_key: str) -> None:
        """Make ``<channel>:<user id>`` an admin."""
        if user_key not in await self.all():
            try:
                await self.db.run(_execute, insert(_GRANTS).values(user_key=user_key, granted_at=utcnow()))
            except IntegrityError:  # granted concurrently
                pass

    async def all(self) -> set[str]:
        """Every user made admin through /auth."""
        return set(await self.db.run(_scalars, select(_GRANTS.c.user_key)))
