"""The ``usage`` table (DESIGN §1.7, §12): one row per model call, the sums the caps and ``/usage`` read, the
console's days, and the roll-up of rows older than 400 days into ``usage_daily``.

Days are days in the configured zone: the callers give the UTC instants a day starts and ends at. Tokens
are prompt plus completion tokens; ``cached_tokens`` is the part of the prompt the server read from its
cache, reported apart (it is in ``prompt_tokens`` already).

A chat's usage is its session's, or for a group every session of the group (``<channel>:group:<chat id>``
and its per-member sessions ``...:<user id>``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from sqlalchemy import case, delete, func, insert, literal, or_, select, update
from sqlalchemy.engine import Connection

from store.engine import Runner
from store.models import UsageDailyRow, UsageFlightRow, UsageRow

logger = logging.getLogger(__name__)

#: Usage rows are kept one by one this many days, then summed per day (``usage_daily``).
USAGE_ROW_DAYS = 400

_U = UsageRow.__table__
_C = _U.c
_D = UsageDailyRow.__table__
_DC = _D.c
_F = UsageFlightRow.__table__
_FC = _F.c
#: A turn in flight is expected to spend at least the average of this many last reply calls.
RECENT_REPLY_CALLS = 50
#: A turn in flight is forgotten after this long (a process that died mid-turn leaves its row behind).
FLIGHT_TTL = timedelta(minutes=10)
_TOKENS = func.coalesce(func.sum(_C.prompt_tokens + _C.completion_tokens), 0)


@dataclass(frozen=True, slots=True)
class Who:
    """Whose usage to sum: a speaker, a chat (a session, or a group's sessions), or nobody in particular (the
    whole bot)."""

    user_id: str | None = None
    session_id: str | None = None
    #: a group's sessions: ``<channel>:group:<chat id>`` and every id that starts with it and ``:``
    group: str | None = None

    def where(self) -> list[Any]:
        """The conditions on ``usage`` rows."""
        conditions: list[Any] = []
        if self.user_id is not None:
            conditions.append(_C.user_id == self.user_id)
        if self.session_id is not None:
            conditions.append(_C.session_id == self.session_id)
        if self.group is not None:
            conditions.append(_group_sessions(self.group))
        return conditions


@dataclass(frozen=True, slots=True)
class CapState:
    """What the caps compare: today's tokens and the tokens of the turns in flight, of the speaker, the group
    and the whole bot, and what one of the last reply calls spent on average."""

    user: int
    group: int
    bot: int
    user_flights: int
    group_flights: int
    bot_flights: int
    per_reply_call: int


@dataclass(frozen=True, slots=True)
class ModelTokens:
    """One model's tokens in a period."""

    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int

    @property
    def total(self) -> int:
        """Prompt and completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class DayReport:
    """One day's usage for the console."""

    day: str
    #: (model, purpose, calls, tokens, cached tokens), most tokens first
    by_model: list[tuple[str, str, int, int, int]]
    #: (session id, tokens), most first
    top_sessions: list[tuple[str, int]]
    #: (speaker, tokens), most first
    top_people: list[tuple[str, int]]
    prompt_tokens: int
    cached_tokens: int

    @property
    def total(self) -> int:
        """All tokens of the day."""
        return sum(row[3] for row in self.by_model)

    @property
    def cache_share(self) -> float | None:
        """The share of prompt tokens the server reported as cached (None on a day without prompts)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None


# --- transaction functions -------------------------------------------------------------------------------
def _add(conn: Connection, rows: list[dict[str, Any]]) -> None:
    conn.execute(insert(_U), rows)


def _tokens(conn: Connection, since: datetime, conditions: list[Any]) -> int:
    return int(conn.execute(select(_TOKENS).where(_C.created_at >= since, *conditions)).scalar() or 0)


def _by_model(conn: Connection, since: datetime, until: datetime, conditions: list[Any]) -> list[ModelTokens]:
    rows = conn.execute(
        select(_C.model, func.count(), func.sum(_C.prompt_tokens), func.sum(_C.completion_tokens),
               func.sum(_C.cached_tokens))
        .where(_C.created_at >= since, _C.created_at < until, *conditions).group_by(_C.model)).all()
    out = [ModelTokens(model, int(n), int(p or 0), int(c or 0), int(k or 0)) for model, n, p, c, k in rows]
    return sorted(out, key=lambda m: (-m.total, m.model))


def _day(conn: Connection, day: str, start: datetime, end: datetime, top: int) -> DayReport:
    period = (_C.created_at >= start, _C.created_at < end)
    tokens = func.sum(_C.prompt_tokens + _C.completion_tokens)
    by_model = conn.execute(
        select(_C.model, _C.purpose, func.count(), tokens, func.sum(_C.cached_tokens)).where(*period)
        .group_by(_C.model, _C.purpose)).all()
    sessions = conn.execute(select(_C.session_id, tokens).where(*period, _C.session_id != "")
                            .group_by(_C.session_id).order_by(tokens.desc(), _C.session_id).limit(top)).all()
    people = conn.execute(select(_C.user_id, tokens).where(*period, _C.user_id != "")
                          .group_by(_C.user_id).order_by(tokens.desc(), _C.user_id).limit(top)).all()
    prompt, cached = conn.execute(select(func.sum(_C.prompt_tokens), func.sum(_C.cached_tokens)).where(*period)).one()
    models = sorted(((m, p, int(n), int(t or 0), int(k or 0)) for m, p, n, t, k in by_model),
                    key=lambda r: (-r[3], r[0], r[1]))
    return DayReport(day, models, [(s, int(t or 0)) for s, t in sessions], [(u, int(t or 0)) for u, t in people],
                     int(prompt or 0), int(cached or 0))


def _group_sessions(group: str) -> Any:
    """The group's shared session and its members' (``<group>:<user id>``). An exact comparison of the id's
    start: LIKE is case-blind on SQLite, and a range depends on PostgreSQL's collation."""
    prefix = group + ":"
    return or_(_C.session_id == group, func.substr(_C.session_id, 1, len(prefix)) == prefix)


def _cap_state(conn: Connection, since: datetime, user_id: str, group: str | None, alive_since: datetime,
               caps: frozenset[str]) -> CapState:
    tokens = _C.prompt_tokens + _C.completion_tokens

    def total(condition: Any, value: Any) -> Any:
        return func.coalesce(func.sum(case((condition, value), else_=0)), 0)

    if caps <= {"user"}:  # the person's rows only, on their index
        user = int(conn.execute(select(func.coalesce(func.sum(tokens), 0))
                                .where(_C.created_at >= since, _C.user_id == user_id)).scalar_one())
        grouped = bot = 0
    else:  # one pass over the day's rows for the three sums
        in_group = _group_sessions(group) if group is not None else literal(False)
        user, grouped, bot = (int(v) for v in conn.execute(select(
            total(_C.user_id == user_id, tokens), total(in_group, tokens), func.coalesce(func.sum(tokens), 0),
        ).where(_C.created_at >= since)).one())
    f_user, f_group, f_bot = (int(v) for v in conn.execute(select(
        total(_FC.user_id == user_id, _FC.tokens), total(_FC.group_id == (group or ""), _FC.tokens),
        func.coalesce(func.sum(_FC.tokens), 0),
    ).where(_FC.created_at >= alive_since)).one())
    if group is None:
        f_group = 0
    recent = select(tokens.label("t")).where(_C.purpose == "reply").order_by(_C.id.desc()) \
        .limit(RECENT_REPLY_CALLS).subquery()
    per_call = conn.execute(select(func.avg(recent.c.t))).scalar()
    return CapState(user, grouped, bot, f_user, f_group, f_bot, int(per_call or 0))


def _begin_flight(conn: Connection, user_id: str, group_id: str, tokens: int, at: datetime) -> int:
    return int(conn.execute(insert(_F).values(user_id=user_id, group_id=group_id, tokens=tokens, created_at=at)
                            .returning(_FC.id)).scalar_one())


def _end_flight(conn: Connection, flight_id: int) -> None:
    conn.execute(delete(_F).where(_FC.id == flight_id))


def _forget_flights(conn: Connection, before: datetime) -> int:
    return conn.execute(delete(_F).where(_FC.created_at < before)).rowcount or 0


def _roll_up(conn: Connection, cutoff: datetime, zone: tzinfo, batch: int) -> int:
    """Sum up to ``batch`` rows older than ``cutoff`` into ``usage_daily`` and delete them; return how many."""
    rows = conn.execute(select(_C.id, _C.created_at, _C.session_id, _C.user_id, _C.model, _C.purpose,
                               _C.prompt_tokens, _C.completion_tokens, _C.cached_tokens)
                        .where(_C.created_at < cutoff).order_by(_C.id).limit(batch)).all()
    if not rows:
        return 0
    sums: dict[tuple[str, str, str, str, str], list[int]] = {}
    for _, created, session_id, user_id, model, purpose, prompt, completion, cached in rows:
        when = created if created.tzinfo is not None else created.replace(tzinfo=UTC)  # SQLite gives naive UTC
        key = (when.astimezone(zone).date().isoformat(), session_id, user_id, model, purpose)
        total = sums.setdefault(key, [0, 0, 0, 0])
        for i, value in enumerate((1, prompt, completion, cached)):
            total[i] += value
    for (day, session_id, user_id, model, purpose), (calls, prompt, completion, cached) in sums.items():
        key = (_DC.day == day, _DC.session_id == session_id, _DC.user_id == user_id, _DC.model == model,
               _DC.purpose == purpose)
        changed = conn.execute(update(_D).where(*key).values(
            calls=_DC.calls + calls, prompt_tokens=_DC.prompt_tokens + prompt,
            completion_tokens=_DC.completion_tokens + completion, cached_tokens=_DC.cached_tokens + cached)).rowcount
        if not changed:
            conn.execute(insert(_D).values(day=day, session_id=session_id, user_id=user_id, model=model,
                                           purpose=purpose, calls=calls, prompt_tokens=prompt,
                                           completion_tokens=completion, cached_tokens=cached))
    conn.execute(delete(_U).where(_C.id.in_([row[0] for row in rows])))
    return len(rows)


def _daily_sums(conn: Connection) -> list[tuple[str, str, str, str, str, int, int, int, int]]:
    rows = conn.execute(select(_DC.day, _DC.session_id, _DC.user_id, _DC.model, _DC.purpose, _DC.calls,
                               _DC.prompt_tokens, _DC.completion_tokens, _DC.cached_tokens)
                        .order_by(_DC.day, _DC.session_id, _DC.user_id, _DC.model, _DC.purpose)).all()
    return [tuple(row) for row in rows]


# --- the store -------------------------------------------------------------------------------------------
class UsageStore:
    """Reads and writes ``usage`` and ``usage_daily`` through the conversation store's database."""

    def __init__(self, store: Runner) -> None:
        self.store = store

    async def add(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert usage rows (``session_id``, ``user_id``, ``model``, ``purpose``, the three token counts,
        ``created_at``) in one transaction."""
        if rows:
            await self.store.run(_add, list(rows))

    async def tokens_since(self, since: datetime, who: Who = Who()) -> int:  # noqa: B008 - frozen, shared safely
        """Prompt and completion tokens of ``who`` since ``since``."""
        return await self.store.run(_tokens, since, who.where())

    async def by_model(self, since: datetime, until: datetime, who: Who = Who()) -> list[ModelTokens]:  # noqa: B008
        """``who``'s tokens per model in ``[since, until)``, most first."""
        return await self.store.run(_by_model, since, until, who.where())

    async def days(self, zone: tzinfo, last: int, today: datetime | None = None, top: int = 5) -> list[DayReport]:
        """The console's figures for the ``last`` days up to today (in ``zone``), newest first."""
        now = (today or datetime.now(UTC)).astimezone(zone)
        reports = []
        for back in range(last):
            day = now.date() - timedelta(days=back)
            start = local_midnight(day, zone)
            end = local_midnight(day + timedelta(days=1), zone)
            reports.append(await self.store.run(_day, day.isoformat(), start, end, top))
        return reports

    async def roll_up(self, zone: tzinfo, now: datetime | None = None, batch: int = 5000,
                      keep_days: int = USAGE_ROW_DAYS) -> int:
        """Sum the rows older than ``keep_days`` into ``usage_daily`` (per day in ``zone``), in batches; return
        how many rows were summed."""
        now = (now or datetime.now(UTC)).astimezone(UTC)
        cutoff = now - timedelta(days=keep_days)
        await self.store.run(_forget_flights, now - FLIGHT_TTL)  # left by processes that died mid-turn
        done = 0
        while True:
            n = await self.store.run(_roll_up, cutoff, zone, batch)
            done += n
            if n < batch:
                return done

    async def cap_state(self, since: datetime, user_id: str, group: str | None, now: datetime,
                        caps: frozenset[str] = frozenset({"user", "group", "bot"})) -> CapState:
        """Today's tokens (since ``since``) of ``user_id``, ``group`` and the bot, for the ``caps`` in force (0
        for the others), and the turns in flight."""
        return await self.store.run(_cap_state, since, user_id, group, now - FLIGHT_TTL, caps)

    async def begin_flight(self, user_id: str, group: str | None, tokens: int, at: datetime) -> int:
        """Note a turn running now that is expected to spend ``tokens``; its id, for :meth:`end_flight`."""
        return await self.store.run(_begin_flight, user_id, group or "", tokens, at)

    async def end_flight(self, flight_id: int) -> None:
        """The turn ended: its tokens are recorded in ``usage`` now."""
        await self.store.run(_end_flight, flight_id)

    async def daily_sums(self) -> list[tuple[str, str, str, str, str, int, int, int, int]]:
        """Every ``usage_daily`` row: day, session, speaker, model, purpose, calls, prompt, completion, cached."""
        return await self.store.run(_daily_sums)


def local_midnight(day: Any, zone: tzinfo) -> datetime:
    """The UTC instant ``day`` (a date) starts at in ``zone``."""
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)
