"""``shared_values``: small named values every process on the database shares (issue 45).

A platform's access token (WeCom's lasts two hours, and every fetch counts against a daily quota) is kept here
with its expiry, so every process uses the same one and only one process fetches a new one: a process claims
the refresh with a conditional update (a lease), fetches, and stores the token; the others wait for it and
read it. The web chat's signing key lives here too, so a visitor's cookie is good on every process.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from store.models import SharedValueRow
from store.store import Store

_T = SharedValueRow.__table__
_C = _T.c


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class SharedValue:
    """A stored value and when it stops being good (None: never)."""

    value: str
    expires_at: datetime | None

    def fresh(self, margin: float = 0.0) -> bool:
        """True when there is a value good for at least ``margin`` more seconds."""
        return bool(self.value) and (self.expires_at is None or self.expires_at > _now() + timedelta(seconds=margin))


def _get(conn: Connection, name: str) -> SharedValue | None:
    row = conn.execute(select(_C.value, _C.expires_at).where(_C.name == name)).first()
    return SharedValue(row.value, row.expires_at) if row is not None else None


def _insert(conn: Connection, name: str, value: str) -> None:
    conn.execute(insert(_T).values(name=name, value=value, expires_at=None, lease_until=None, updated_at=_now()))


def _claim(conn: Connection, name: str, margin: float, lease: float, replacing: str | None) -> bool:
    now = _now()
    stale = or_(_C.value == "", _C.expires_at.is_(None), _C.expires_at <= now + timedelta(seconds=margin),
                *([_C.value == replacing] if replacing is not None else []))
    free = or_(_C.lease_until.is_(None), _C.lease_until < now)
    result = conn.execute(update(_T).where(and_(_C.name == name, stale, free))
                          .values(lease_until=now + timedelta(seconds=lease)))
    return result.rowcount == 1


def _put(conn: Connection, name: str, value: str, expires_at: datetime | None) -> None:
    conn.execute(update(_T).where(_C.name == name)
                 .values(value=value, expires_at=expires_at, lease_until=None, updated_at=_now()))


def _release(conn: Connection, name: str) -> None:
    conn.execute(update(_T).where(_C.name == name).values(lease_until=None))


class SharedValues:
    """Named values in the database (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def get(self, name: str) -> SharedValue | None:
        """The value called ``name``, or None."""
        return await self.store.run(_get, name)

    async def _ensure(self, name: str, value: str = "") -> None:
        if await self.get(name) is None:
            try:
                await self.store.run(_insert, name, value)
            except IntegrityError:  # another process made it first
                pass

    async def setdefault(self, name: str, value: str) -> str:
        """The value called ``name``; ``value`` is stored first when there is none (the first process wins)."""
        await self._ensure(name, value)
        found = await self.get(name)
        assert found is not None
        return found.value

    async def claim(self, name: str, *, margin: float, lease: float, replacing: str | None = None) -> bool:
        """Claim the refresh of ``name``: True for exactly one caller while the value is missing, good for less
        than ``margin`` seconds, or still ``replacing`` (a value found bad), until it :meth:`put` a new one or
        ``lease`` seconds pass (it died)."""
        await self._ensure(name)
        return await self.store.run(_claim, name, margin, lease, replacing)

    async def put(self, name: str, value: str, expires_at: datetime | None) -> None:
        """Store a new value (and end the claim)."""
        await self._ensure(name)
        await self.store.run(_put, name, value, expires_at)

    async def release(self, name: str) -> None:
        """End a claim without a new value (the refresh failed): another caller may try."""
        await self.store.run(_release, name)
