"""The text of ``/usage`` (DESIGN §1.4): this chat's and the speaker's tokens today and this month, per model,
against the caps."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from core.records import SessionInfo
from core.usage import speaker_of
from store.usage import ModelTokens, UsageStore, Who, local_midnight
from usage.caps import chat_of, day_bounds, reset_text

if TYPE_CHECKING:
    from config.settings import Config


@dataclass(frozen=True, slots=True)
class Figures:
    """One party's tokens today and this month, per model."""

    today: list[ModelTokens]
    month: list[ModelTokens]

    @property
    def today_total(self) -> int:
        """Tokens today."""
        return sum(m.total for m in self.today)

    @property
    def month_total(self) -> int:
        """Tokens this month."""
        return sum(m.total for m in self.month)


async def figures(usage: UsageStore, who: Who, now: datetime, zone: Any) -> Figures:
    """``who``'s tokens today and this month (days and months in ``zone``)."""
    start, end = day_bounds(now, zone)
    local = now.astimezone(zone)
    month_start = local_midnight(local.date().replace(day=1), zone)
    return Figures(await usage.by_model(start, end, who), await usage.by_model(month_start, end, who))


def _models(fig: Figures) -> list[str]:
    today = {m.model: m.total for m in fig.today}
    lines = []
    for m in fig.month:
        cached = f", {m.cached_tokens:,} of its prompt tokens cached" if m.cached_tokens else ""
        lines.append(f"• {m.model}: {today.get(m.model, 0):,} today, {m.total:,} this month ({m.calls:,} "
                     f"call{'' if m.calls == 1 else 's'}{cached})")
    return lines


def _against(used: int, cap: int) -> str:
    if not cap:
        return ""
    left = cap - used
    return f" of a daily cap of {cap:,} ({left:,} left)" if left > 0 else f" of a daily cap of {cap:,} (reached)"


async def usage_text(usage: UsageStore, cfg: Config, info: SessionInfo, channel: str, user_id: str, *,
                     is_admin: bool, now: datetime | None = None) -> str:
    """The ``/usage`` reply for ``channel:user_id`` in ``info``'s chat."""
    now = now or datetime.now(UTC)
    zone = cfg.zone()
    local = now.astimezone(zone)
    chat = await figures(usage, chat_of(info), now, zone)
    you = await figures(usage, Who(user_id=speaker_of(channel, user_id)), now, zone)
    lines = [f"Tokens used today ({local.date().isoformat()}) and this month ({local.strftime('%B %Y')}), "
             f"days in {zone}:"]
    label = "This group" if info.is_group else "This chat"
    group_cap = cfg.usage_cap_group_daily_tokens if info.is_group else 0
    lines.append(f"{label}: {chat.today_total:,} today{_against(chat.today_total, group_cap)}, "
                 f"{chat.month_total:,} this month")
    lines.extend(_models(chat))
    lines.append(f"You: {you.today_total:,} today{_against(you.today_total, cfg.usage_cap_user_daily_tokens)}, "
                 f"{you.month_total:,} this month")
    lines.extend(_models(you))
    if cfg.usage_cap_daily_tokens:
        start, _ = day_bounds(now, zone)
        bot = await usage.tokens_since(start)
        lines.append(f"The whole bot: {bot:,} today{_against(bot, cfg.usage_cap_daily_tokens)}")
    caps = (cfg.usage_cap_user_daily_tokens, group_cap, cfg.usage_cap_daily_tokens)
    if any(caps):
        then = (f"answers come from {cfg.usage_fallback_model}" if cfg.usage_fallback_model
                else "messages are not answered")
        lines.append(f"Over a cap, {then} until the caps reset at {reset_text(now, zone)}."
                     + (" You are an admin: the caps do not apply to you." if is_admin else ""))
    else:
        lines.append("No daily caps are set.")
    return "\n".join(lines)
