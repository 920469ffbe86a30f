"""The daily caps (DESIGN §1.2, §12): checked before a turn, for the speaker, the group and the whole bot.

A day is a day in the configured zone. Tokens are prompt plus completion tokens of every recorded call
(replies, tool rounds, flushes, summaries, transcriptions), so what a summary spends counts, although a
summary is never refused. Over a cap, the turn runs on ``usage_fallback_model`` when one is set; otherwise
the speaker gets one sentence naming the cap and when it resets. Admins are exempt.

The check reads what is recorded in the database, and every model call is recorded as it is answered (not
at the end of its turn), so processes sharing a database see each other's spending: a cap is overrun at
most by the turns already running when it was reached.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from core.records import SessionInfo
from store.usage import UsageStore, Who, local_midnight

logger = logging.getLogger(__name__)

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


def speaker_of(channel: str, user_id: str) -> str:
    """The speaker's key in ``usage`` and the person cap: ``<channel>:<user id>``."""
    return f"{channel}:{user_id}"


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


class UsageCaps:
    """Decides, before a turn, whether a cap was reached."""

    def __init__(self, usage: UsageStore, config: Callable[[], Any]) -> None:
        self.usage = usage
        self.config = config

    def caps(self) -> list[tuple[str, int]]:
        """The caps in force, person first: (name, tokens per day)."""
        cfg = self.config()
        caps = [("user", cfg.usage_cap_user_daily_tokens), ("group", cfg.usage_cap_group_daily_tokens),
                ("bot", cfg.usage_cap_daily_tokens)]
        return [(name, cap) for name, cap in caps if cap > 0]

    async def check(self, speaker: str, info: SessionInfo, *, is_admin: bool,
                    now: datetime | None = None) -> CapDecision:
        """The decision for a turn of ``speaker`` in ``info``'s session; caps are checked person, group, bot."""
        caps = self.caps()
        if not caps or is_admin:
            return ALLOWED
        cfg = self.config()
        zone = cfg.zone()
        now = now or datetime.now(UTC)
        start, _ = day_bounds(now, zone)
        group = group_of(info)
        for name, cap in caps:
            if name == "user":
                who = Who(user_id=speaker)
            elif name == "group":
                if group is None:
                    continue
                who = Who(group=group)
            else:
                who = Who()
            used = await self.usage.tokens_since(start, who)
            if used < cap:
                continue
            if cfg.usage_fallback_model:
                logger.info("session %s: the %s cap (%d tokens) is reached (%d used): answering with %s",
                            info.session_id, name, cap, used, cfg.usage_fallback_model)
                return CapDecision(cap=name, model=cfg.usage_fallback_model)
            logger.info("session %s: the %s cap (%d tokens) is reached (%d used): refused", info.session_id, name,
                        cap, used)
            return CapDecision(cap=name, refusal=REFUSALS[name].format(cap=f"{cap:,}", reset=reset_text(now, zone)))
        return ALLOWED
