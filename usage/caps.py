"""The daily caps (DESIGN §1.2, §12): checked before a turn, for the speaker, the group and the whole bot.

A day is a day in the configured zone. Tokens are prompt plus completion tokens of every recorded call
(replies, tool rounds, flushes, summaries, transcriptions), so what a summary spends counts, although a
summary is never refused. Over a cap, the turn runs on ``usage_fallback_model`` when one is set; otherwise
the speaker gets one sentence naming the cap and when it resets. Admins are exempt.

The check reads what is recorded in the database, and every model call is recorded as it is answered (not
at the end of its turn). A turn that runs is noted in ``usage_flights`` with what it is expected to spend
(the most one of this process's recent turns spent, or the average of the last reply calls), and the checks count
those too: processes sharing a database see each other's turns before their tokens are recorded. Checks
are one at a time in a process, so two of its turns never both take the last room under a cap; two
processes checking at the same moment can, so a cap is overrun by at most about one turn per process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from core.records import SessionInfo
from store.usage import UsageStore, Who, local_midnight

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

#: A turn in flight is expected to spend as much as the most of this process's last this many turns.
RECENT_TURNS = 20

#: The sentences of a refusal, by cap: what was reached, then when it resets.
REFUSALS = {
    "user": "You have used your daily limit of {cap} tokens; it resets at midnight ({reset}).",
    "group": "This group has used its daily limit of {cap} tokens; it resets at midnight ({reset}).",
    "bot": "The bot has used its daily limit of {cap} tokens for everyone; it resets at midnight ({reset}).",
}


@dataclass(frozen=True, slots=True)
class CapDecision:
    """What a turn may do: run as usual, run on the fallback model, or be refused with a sentence."""

    #: the cap reached: "user", "group", "bot", or None
    cap: str | None = None
    #: the model the turn runs on instead (``usage_fallback_model``), or None
    model: str | None = None
    #: the sentence the speaker gets instead of an answer, or None
    refusal: str | None = None

    @property
    def refused(self) -> bool:
        """True when the turn does not run."""
        return self.refusal is not None


ALLOWED = CapDecision()


def group_of(info: SessionInfo) -> str | None:
    """The group chat a session belongs to (``<channel>:group:<chat id>``), or None for a private chat."""
    return f"{info.channel}:group:{info.chat_id}" if info.is_group else None


def chat_of(info: SessionInfo) -> Who:
    """Whose usage is "this chat's": the group's sessions, or the private session."""
    group = group_of(info)
    return Who(group=group) if group is not None else Who(session_id=info.session_id)


def day_bounds(now: datetime, zone: Any) -> tuple[datetime, datetime]:
    """The UTC instants today starts and ends at in ``zone``."""
    today = now.astimezone(zone).date()
    return local_midnight(today, zone), local_midnight(today + timedelta(days=1), zone)


def reset_text(now: datetime, zone: Any) -> str:
    """When the caps reset, for a sentence: ``00:00 Europe/Berlin, in 3 h 20 min``."""
    _, end = day_bounds(now, zone)
    left = max(0, int((end - now).total_seconds()) // 60)
    hours, minutes = divmod(left, 60)
    span = f"{hours} h {minutes} min" if hours else f"{max(1, minutes)} min"
    return f"00:00 {zone}, in {span}"


@dataclass(slots=True)
class Turn:
    """One turn under the caps: the decision, and what the turn spends (the recorder adds to ``tally``)."""

    decision: CapDecision
    tally: list[int] = field(default_factory=lambda: [0])


class UsageCaps:
    """Decides, before a turn, whether a cap was reached, and keeps the turns in flight visible to every
    process until their tokens are recorded."""

    def __init__(self, usage: UsageStore, config: Callable[[], Config]) -> None:
        self.usage = usage
        self.config = config
        #: one check at a time in this process: a turn checked after another sees that one in flight
        self._lock = asyncio.Lock()
        #: what the last turns of this process spent: a turn in flight is expected to spend their most
        self._recent: deque[int] = deque(maxlen=RECENT_TURNS)

    def caps(self) -> list[tuple[str, int]]:
        """The caps in force, person first: (name, tokens per day)."""
        cfg = self.config()
        caps = [("user", cfg.usage_cap_user_daily_tokens), ("group", cfg.usage_cap_group_daily_tokens),
                ("bot", cfg.usage_cap_daily_tokens)]
        return [(name, cap) for name, cap in caps if cap > 0]

    @contextlib.asynccontextmanager
    async def turn(self, speaker: str, info: SessionInfo, *, is_admin: bool,
                   now: datetime | None = None) -> AsyncIterator[Turn]:
        """Around a turn of ``speaker`` in ``info``'s session: the decision (caps checked person, group, bot;
        the turns in flight count as what they are expected to spend), and the turn noted as in flight while
        it runs. A refused turn is not in flight."""
        caps = self.caps()
        if not caps:
            yield Turn(ALLOWED)
            return
        now = now or datetime.now(UTC)
        group = group_of(info)
        async with self._lock:
            decision, expected = await self._decide(caps, speaker, info, group, is_admin=is_admin, now=now)
            flight = None if decision.refused else await self.usage.begin_flight(speaker, group, expected, now)
        turn = Turn(decision)
        try:
            yield turn
        finally:
            if flight is not None:
                self._recent.append(turn.tally[0])
                try:
                    await self.usage.end_flight(flight)
                except Exception as exc:  # noqa: BLE001 - it expires by itself (store/usage.py FLIGHT_TTL)
                    logger.warning("a turn's in-flight mark could not be removed (%s); it expires by itself", exc)

    async def refusal(self, speaker: str, info: SessionInfo, *, is_admin: bool,
                      now: datetime | None = None) -> str | None:
        """The sentence a turn of ``speaker`` would be refused with now, or None (allowed, or on the fallback
        model). Asked before a photo or voice note is fetched and transcribed, so a refused one costs nothing;
        the turn itself decides again (:meth:`turn`)."""
        caps = self.caps()
        if not caps:
            return None
        async with self._lock:
            decision, _ = await self._decide(caps, speaker, info, group_of(info), is_admin=is_admin,
                                             now=now or datetime.now(UTC))
        return decision.refusal

    async def _decide(self, caps: list[tuple[str, int]], speaker: str, info: SessionInfo, group: str | None, *,
                      is_admin: bool, now: datetime) -> tuple[CapDecision, int]:
        cfg = self.config()
        zone = cfg.zone()
        start, _ = day_bounds(now, zone)
        state = await self.usage.cap_state(start, speaker, group, now, frozenset(name for name, _ in caps))
        expected = max(max(self._recent, default=0), state.per_reply_call)
        if is_admin:  # exempt, but in flight: an admin's turn spends the bot's budget too
            return ALLOWED, expected
        for name, cap in caps:
            if name == "group" and group is None:
                continue
            used, flying = {"user": (state.user, state.user_flights), "group": (state.group, state.group_flights),
                            "bot": (state.bot, state.bot_flights)}[name]
            if used + flying < cap:
                continue
            if cfg.usage_fallback_model:
                logger.info("session %s: the %s cap (%d tokens) is reached (%d used, %d in flight): answering "
                            "with %s", info.session_id, name, cap, used, flying, cfg.usage_fallback_model)
                return CapDecision(cap=name, model=cfg.usage_fallback_model), expected
            logger.info("session %s: the %s cap (%d tokens) is reached (%d used, %d in flight): refused",
                        info.session_id, name, cap, used, flying)
            refusal = REFUSALS[name].format(cap=f"{cap:,}", reset=reset_text(now, zone))
            return CapDecision(cap=name, refusal=refusal), 0
        return ALLOWED, expected
