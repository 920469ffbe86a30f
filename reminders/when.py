"""``<when>`` of ``/remind`` and ``schedule_message``: English and Chinese forms to an instant in a zone.

The forms (DESIGN §1.4): ``in 20m``, ``in 2 hours``, ``at 18:30``, ``tomorrow 9:00``, ``monday 9:00``,
``2026-12-24 08:00``, ``every day 9:00``, ``every monday 9:00``, ``every week``, ``every 2 hours``; and
their Chinese equivalents: ``20分钟后``, ``2小时后``, ``明天早上9点``, ``下午3点半``, ``周一9点``,
``12月24日8点``, ``每天早上9点``, ``每周一9点``, ``每隔2小时``.

Why our own grammar and not a package: ``dateparser`` (the most used one on PyPI) was tried first. It keeps
the UTC offset of *now* for ``tomorrow 9:00`` across a DST change (09:00 EST on the day New York is on EDT,
an hour wrong) and parses none of ``明天早上9点``, ``下午3点``, ``今晚8点``. ``parsedatetime`` is English only,
and the Chinese ones (``jionlp``, ``chinesetimenlp``) are large NLP kits or unmaintained. The forms a chat
user types are few; a small grammar, with the wall clock resolved by :mod:`zoneinfo`, is exact and testable.

Wall-clock forms (a time of day, a date, a day, a daily rule) are resolved in the zone on that day, so
9:00 stays 9:00 across DST; durations (``in 20m``) are absolute. A day without a time means 09:00. A
time of day alone means its next occurrence (today, or tomorrow once passed); a time on a named day that
has passed is an error ("that time has passed").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

#: The time of day of a day named without one ("tomorrow", "明天", "2026-12-24").
DEFAULT_TIME = time(9, 0)
#: The shortest interval of a recurring reminder.
MIN_INTERVAL = timedelta(minutes=1)
#: The longest span ahead a reminder may be set.
MAX_AHEAD = timedelta(days=5 * 366)

EXAMPLES = ("in 20m", "at 18:30", "tomorrow 9:00", "2026-12-24 08:00", "every day 9:00", "every monday 9:00",
            "20分钟后", "明天早上9点", "每天早上9点")

_WEEKDAYS = {"monday": 0, "mon": 0, "tuesday": 1, "tue": 1, "tues": 1, "wednesday": 2, "wed": 2, "thursday": 3,
             "thu": 3, "thur": 3, "thurs": 3, "friday": 4, "fri": 4, "saturday": 5, "sat": 5, "sunday": 6, "sun": 6}
_DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_CN_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6, "七": 6}
_CN_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
              "九": 9}
_UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60, "minute": 60,
          "minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600, "d": 86400,
          "day": 86400, "days": 86400, "w": 604800, "week": 604800, "weeks": 604800}
_CN_UNITS = {"秒": 1, "秒钟": 1, "分": 60, "分钟": 60, "小时": 3600, "钟头": 3600, "个小时": 3600, "个钟头": 3600,
             "天": 86400, "日": 86400, "周": 604800, "个星期": 604800, "星期": 604800}

_END = r"(?=\s|$|[,，;；:：])"
_NUM = r"[0-9零〇一二两三四五六七八九十百]+"
_EN_TIME = (r"(?:(?P<noon>noon|midnight)|(?P<h>\d{1,2})(?:[:.](?P<mi>\d{2}))?\s*(?P<ap>a\.?m\.?|p\.?m\.?)?)")
_CN_PERIOD = r"(?P<period>凌晨|清晨|早上|早晨|上午|早|中午|下午|午后|傍晚|晚上|晚间|夜里|夜间|晚)?"
_CN_CLOCK = (rf"(?:(?P<ch>{_NUM})\s*(?:点|點|时|時)\s*"
             rf"(?:(?P<half>半)|(?P<quarter>一刻|三刻)|(?P<cm>{_NUM})\s*分?|整|钟)?"
             r"|(?P<dh>\d{1,2})[:：](?P<dm>\d{2}))")
_UNIT_ALT = "|".join(sorted(_UNITS, key=len, reverse=True))
_CN_UNIT_ALT = "|".join(sorted(_CN_UNITS, key=len, reverse=True))
_DURATION = rf"(?:\d+\s*(?:{_UNIT_ALT})(?![a-z])\s*(?:and\s+)?)+"
_WEEKDAY_ALT = "|".join(sorted(_WEEKDAYS, key=len, reverse=True))


class WhenError(ValueError):
    """``<when>`` could not be read, or names a time that has passed; the message says which, for the user."""


@dataclass(frozen=True, slots=True)
class When:
    """Where a ``<when>`` leads: the first instant (UTC) and the rule of a recurring reminder (or None)."""

    due: datetime
    every: str | None = None


def examples() -> str:
    """The forms to show with an error."""
    return ", ".join(EXAMPLES)


def _cn_number(text: str) -> int:
    """``20``, ``二十``, ``两``, ``十五``, ``一百`` as an int."""
    if text.isdigit():
        return int(text)
    total, current = 0, 0
    for ch in text:
        if ch in _CN_DIGITS:
            current = _CN_DIGITS[ch]
        elif ch == "十":
            total += (current or 1) * 10
            current = 0
        elif ch == "百":
            total += (current or 1) * 100
            current = 0
        else:
            raise WhenError(f"{text!r} is not a number")
    return total + current


def _normalise(text: str) -> str:
    full = str.maketrans("０１２３４５６７８９：", "0123456789:")
    return text.translate(full).strip()


def _clock(h: int, mi: int) -> time:
    if not (0 <= h <= 24 and 0 <= mi <= 59) or (h == 24 and mi):
        raise WhenError(f"{h}:{mi:02d} is not a time of day")
    return time(0 if h == 24 else h, mi)


def _en_time(m: re.Match[str]) -> time:
    noon = (_group(m, "noon") or "").lower()
    if noon:
        return time(12, 0) if noon == "noon" else time(0, 0)
    h, mi = int(m.group("h")), int(_group(m, "mi") or 0)
    ap = (_group(m, "ap") or "").replace(".", "").lower()
    if ap:
        if not 1 <= h <= 12:
            raise WhenError(f"{h}{ap} is not a time of day")
        h = h % 12 + (12 if ap == "pm" else 0)
    return _clock(h, mi)


def _cn_time(m: re.Match[str]) -> time:
    if m.group("dh") is not None:
        h, mi = int(m.group("dh")), int(m.group("dm"))
    else:
        h = _cn_number(m.group("ch"))
        mi = 30 if m.group("half") else 15 if m.group("quarter") == "一刻" else 45 if m.group("quarter") else 0
        if m.group("cm"):
            mi = _cn_number(m.group("cm"))
    period = m.group("period") or ""
    if period in ("中午",) and h < 11:
        h += 12
    elif period in ("下午", "午后", "傍晚", "晚上", "晚间", "夜里", "夜间", "晚") and h < 12:
        h += 12
    elif period in ("凌晨", "清晨", "早上", "早晨", "上午", "早") and h == 12:
        h = 0
    return _clock(h, mi)


def _at(day: date, at: time, zone: ZoneInfo) -> datetime:
    """The instant (UTC) of the wall-clock ``at`` on ``day`` in ``zone``."""
    return datetime.combine(day, at, tzinfo=zone).astimezone(UTC)


def _next_clock(at: time, now: datetime, zone: ZoneInfo, weekday: int | None = None) -> datetime:
    """The first instant after ``now`` whose wall clock in ``zone`` is ``at`` (on ``weekday``, if given)."""
    day = now.astimezone(zone).date()
    for offset in range(8):
        candidate_day = day + timedelta(days=offset)
        if weekday is not None and candidate_day.weekday() != weekday:
            continue
        candidate = _at(candidate_day, at, zone)
        if candidate > now:
            return candidate
    raise AssertionError("unreachable: a week always has the day")


def _on_day(day: date, at: time, now: datetime, zone: ZoneInfo, what: str) -> datetime:
    due = _at(day, at, zone)
    if due <= now:
        shown = datetime.combine(day, at).strftime("%Y-%m-%d %H:%M")
        raise WhenError(f"that time has passed ({what}: {shown} {zone.key}); give a time in the future")
    return due


# --- the forms: each a (pattern, resolver) pair; the first that matches at the start wins ---------------
def _duration_seconds(text: str) -> int:
    total = 0
    for n, unit in re.findall(rf"(\d+)\s*({_UNIT_ALT})(?![a-z])", text, re.IGNORECASE):
        if len(n.lstrip("0")) > 12:  # more seconds than any date holds (and int() refuses 4,300 digits)
            raise OverflowError(f"{n} {unit}")
        total += int(n) * _UNITS[unit.lower()]
    return total


_FORMS: list[tuple[re.Pattern[str], str]] = []


def _form(pattern: str, kind: str) -> None:
    _FORMS.append((re.compile(pattern, re.IGNORECASE), kind))


_form(rf"in\s+(?P<dur>{_DURATION})", "in")
_form(r"in\s+(?P<an>an?|one)\s+(?P<unit>minute|hour|day|week)" + _END, "in_one")
_form(r"in\s+half\s+an\s+hour" + _END, "in_half_hour")
_form(rf"(?:过|再过)?(?P<n>{_NUM}|半)\s*(?P<unit>{_CN_UNIT_ALT})\s*(?:半)?\s*(?:之后|以后|后)", "cn_in")
_form(r"半(?:个)?(?:小时|钟头)\s*(?:之后|以后|后)", "cn_half_hour")
_form(rf"(?:every\s+day|daily|everyday)\s+(?:at\s+)?{_EN_TIME}" + _END, "daily")
_form(rf"every\s+(?P<wd>{_WEEKDAY_ALT})\s+(?:at\s+)?{_EN_TIME}" + _END, "weekly")
_form(rf"every\s+(?P<wd>{_WEEKDAY_ALT})" + _END, "weekly_default")
_form(rf"every\s+week(?:\s+(?:at\s+)?{_EN_TIME})?" + _END, "every_week")
_form(r"(?:every\s+day|daily|everyday)" + _END, "daily_default")
_form(rf"every\s+(?P<dur>{_DURATION})", "interval")
_form(r"every\s+(?P<unit>minute|hour)" + _END, "interval_one")
_form(r"hourly" + _END, "hourly")
_form(rf"每天\s*{_CN_PERIOD}\s*{_CN_CLOCK}", "cn_daily")
_form(rf"每(?:周|星期|礼拜)(?P<cwd>[一二三四五六日天七])\s*{_CN_PERIOD}\s*{_CN_CLOCK}", "cn_weekly")
_form(rf"每隔?\s*(?P<n>{_NUM})?\s*(?:个)?(?P<unit>分钟|小时|钟头)", "cn_interval")
_form(r"每(?:周|星期|礼拜)", "every_week")
_form(r"每天", "daily_default")
_form(rf"(?P<day>today|tomorrow|tmr|tmrw|the\s+day\s+after\s+tomorrow|day\s+after\s+tomorrow|tonight)\s+"
      rf"(?:at\s+)?{_EN_TIME}" + _END, "day_time")
_form(rf"{_EN_TIME}\s+(?P<day>today|tomorrow|tonight)" + _END, "day_time")
_form(r"(?P<day>tomorrow|tmr|tmrw|the\s+day\s+after\s+tomorrow|day\s+after\s+tomorrow)" + _END, "day_default")
_form(rf"(?:on\s+|next\s+)?(?P<wd>{_WEEKDAY_ALT})\s+(?:at\s+)?{_EN_TIME}" + _END, "weekday_time")
_form(rf"(?:on\s+|next\s+)?(?P<wd>{_WEEKDAY_ALT})" + _END, "weekday_default")
_form(r"(?:on\s+)?(?P<y>\d{4})[-/.](?P<mo>\d{1,2})[-/.](?P<d>\d{1,2})(?:(?:T|\s+)(?:at\s+)?" + _EN_TIME + ")?" + _END,
      "date")
_form(rf"(?:(?P<y>\d{{4}})\s*年\s*)?(?P<mo>\d{{1,2}}|[一二三四五六七八九十]+)\s*月\s*(?P<d>\d{{1,2}}|[一二三四五六七八九十]+)\s*(?:日|号|號)"
      rf"(?:\s*{_CN_PERIOD}\s*{_CN_CLOCK})?", "cn_date")
_form(rf"(?P<cday>今天|明天|后天|大后天|今晚|明晚|今早|明早)\s*{_CN_PERIOD}\s*(?:{_CN_CLOCK})?", "cn_day")
_form(rf"(?P<next>下)?(?:周|星期|礼拜)(?P<cwd>[一二三四五六日天七])\s*{_CN_PERIOD}\s*(?:{_CN_CLOCK})?", "cn_weekday")
_form(r"(?:at\s+)?(?P<h>\d{1,2})(?:[:.](?P<mi>\d{2}))\s*(?P<ap>a\.?m\.?|p\.?m\.?)?" + _END, "clock")
_form(r"(?:at\s+)?(?P<h>\d{1,2})\s*(?P<ap>a\.?m\.?|p\.?m\.?)" + _END, "clock")
_form(r"at\s+(?P<noon>noon|midnight)" + _END, "clock")
_form(r"at\s+(?P<h>\d{1,2})" + _END, "clock")
_form(rf"{_CN_PERIOD}\s*{_CN_CLOCK}", "cn_clock")


def _group(m: re.Match[str], name: str) -> str | None:
    return m.groupdict().get(name) or None


def _resolve(kind: str, m: re.Match[str], now: datetime, zone: ZoneInfo) -> When:
    today = now.astimezone(zone).date()
    if kind == "in":
        return When(now + timedelta(seconds=_duration_seconds(m.group("dur"))))
    if kind == "in_one":
        return When(now + timedelta(seconds=_UNITS[m.group("unit").lower()]))
    if kind in ("in_half_hour", "cn_half_hour"):
        return When(now + timedelta(minutes=30))
    if kind == "cn_in":
        unit = _CN_UNITS[m.group("unit")]
        n = 0.5 if m.group("n") == "半" else _cn_number(m.group("n"))
        if m.group(0).rstrip("之以后 ").endswith("半"):
            n += 0.5
        if unit >= 86400:  # days and weeks: the same wall clock that many days on
            return When(_at(today + timedelta(days=n * unit / 86400), now.astimezone(zone).time(), zone))
        return When(now + timedelta(seconds=n * unit))
    if kind in ("daily", "cn_daily", "daily_default"):
        at = DEFAULT_TIME if kind == "daily_default" else _en_time(m) if kind == "daily" else _cn_time(m)
        return When(_next_clock(at, now, zone), f"daily {at:%H:%M}")
    if kind in ("weekly", "weekly_default", "cn_weekly"):
        wd = _CN_WEEKDAYS[m.group("cwd")] if kind == "cn_weekly" else _WEEKDAYS[m.group("wd").lower()]
        at = DEFAULT_TIME if kind == "weekly_default" else _en_time(m) if kind == "weekly" else _cn_time(m)
        return When(_next_clock(at, now, zone, wd), f"weekly {wd} {at:%H:%M}")
    if kind == "every_week":
        local = now.astimezone(zone)
        at = _en_time(m) if _group(m, "h") or _group(m, "noon") else local.time().replace(second=0, microsecond=0)
        return When(_next_clock(at, now + timedelta(minutes=1), zone, local.weekday()), f"weekly {local.weekday()} "
                    f"{at:%H:%M}")
    if kind in ("interval", "interval_one", "hourly", "cn_interval"):
        if kind == "interval":
            seconds = _duration_seconds(m.group("dur"))
        elif kind == "cn_interval":
            seconds = (_cn_number(m.group("n")) if m.group("n") else 1) * _CN_UNITS[m.group("unit")]
        else:
            seconds = 3600 if kind == "hourly" or m.group("unit").lower() == "hour" else 60
        if timedelta(seconds=seconds) < MIN_INTERVAL:
            raise WhenError("a recurring reminder repeats at most once a minute")
        return When(now + timedelta(seconds=seconds), f"interval {seconds}")
    if kind in ("day_time", "day_default"):
        word = " ".join(m.group("day").lower().split())
        offset = {"today": 0, "tonight": 0, "tomorrow": 1, "tmr": 1, "tmrw": 1}.get(word, 2)
        at = DEFAULT_TIME if kind == "day_default" else _en_time(m)
        if word == "tonight" and at.hour < 12 and not _group(m, "ap"):
            at = at.replace(hour=at.hour + 12)
        return When(_on_day(today + timedelta(days=offset), at, now, zone, word))
    if kind in ("weekday_time", "weekday_default"):
        at = DEFAULT_TIME if kind == "weekday_default" else _en_time(m)
        return When(_next_clock(at, now, zone, _WEEKDAYS[m.group("wd").lower()]))
    if kind in ("date", "cn_date"):
        year = int(m.group("y")) if m.group("y") else today.year
        month, day_n = _cn_number(m.group("mo")), _cn_number(m.group("d"))
        try:
            day = date(year, month, day_n)
        except ValueError as exc:
            raise WhenError(f"{year}-{month:02d}-{day_n:02d} is not a date") from exc
        has_time = _group(m, "h") or _group(m, "noon") if kind == "date" else _group(m, "ch") or _group(m, "dh")
        at = (_en_time(m) if kind == "date" else _cn_time(m)) if has_time else DEFAULT_TIME
        if kind == "cn_date" and not m.group("y") and _at(day, at, zone) <= now:
            day = day.replace(year=year + 1)  # 12月24日 after it passed this year: next year's
        return When(_on_day(day, at, now, zone, "the date"))
    if kind == "cn_day":
        word = m.group("cday")
        offset = {"今天": 0, "今晚": 0, "今早": 0, "明天": 1, "明晚": 1, "明早": 1, "后天": 2, "大后天": 3}[word]
        has_time = _group(m, "ch") or _group(m, "dh")
        if has_time:
            at = _cn_time(m)
            if word in ("今晚", "明晚") and not m.group("period") and at.hour < 12:
                at = at.replace(hour=at.hour + 12)
        else:
            at = time(20, 0) if word in ("今晚", "明晚") else DEFAULT_TIME
            if m.group("period"):
                at = {"中午": time(12, 0), "下午": time(15, 0), "傍晚": time(18, 0), "晚上": time(20, 0)}.get(
                    m.group("period"), at)
        return When(_on_day(today + timedelta(days=offset), at, now, zone, word))
    if kind == "cn_weekday":
        wd = _CN_WEEKDAYS[m.group("cwd")]
        at = _cn_time(m) if _group(m, "ch") or _group(m, "dh") else DEFAULT_TIME
        if m.group("next"):  # 下周一: the Monday of next week
            monday = today + timedelta(days=7 - today.weekday())
            return When(_on_day(monday + timedelta(days=wd), at, now, zone, "下周"))
        return When(_next_clock(at, now, zone, wd))
    if kind == "clock":
        return When(_next_clock(_en_time(m), now, zone))
    if kind == "cn_clock":
        return When(_next_clock(_cn_time(m), now, zone))
    raise AssertionError(kind)


def parse_prefix(text: str, now: datetime, zone: ZoneInfo) -> tuple[When, str]:
    """Read a ``<when>`` at the start of ``text``; return it and the rest (the reminder's text).

    Raises :class:`WhenError` when no form matches, or the time has passed or is too far ahead.
    """
    if now.tzinfo is None:
        raise ValueError("now must be time-zone aware")
    source = _normalise(text)
    for pattern, kind in _FORMS:
        m = pattern.match(source)
        if m is None:
            continue
        try:
            when = _resolve(kind, m, now, zone)
        except OverflowError:  # a number no date holds ("in 99999999999999999999 days"): far past the limit
            raise WhenError("that is too far ahead (at most 5 years)") from None
        if when.due - now > MAX_AHEAD:
            raise WhenError("that is too far ahead (at most 5 years)")
        rest = source[m.end():].lstrip(" ,，;；:：")
        rest = re.sub(r"^(?:to\s+|提醒我\s*|提醒\s*|叫我\s*)", "", rest, flags=re.IGNORECASE)
        return when, rest.strip()
    raise WhenError(f"I can't read a time at the start of {text.strip()[:40]!r}. Examples: {examples()}")


def parse_when(text: str, now: datetime, zone: ZoneInfo) -> When:
    """Read a whole ``<when>``; anything left over is an error."""
    when, rest = parse_prefix(text, now, zone)
    if rest:
        raise WhenError(f"I can't read {text.strip()!r} as a time (left over: {rest!r}). Examples: {examples()}")
    return when


def parse_rule(every: str, zone: ZoneInfo, now: datetime) -> When:
    """A recurring rule given apart (the ``every`` of ``schedule_message``): ``day 9:00``, ``monday 9:00``,
    ``week``, ``2 hours``, ``每天9点``, or a whole ``every …`` form."""
    text = _normalise(every)
    if not re.match(r"(every|daily|hourly|每)", text, re.IGNORECASE):
        text = f"every {text}"
    try:
        when = parse_when(text, now, zone)
    except WhenError:
        when = When(now)
    if when.every is None:
        raise WhenError(f"{every!r} is not a repeat rule. Examples: day 9:00, monday 9:00, week, 2 hours, 每天早上9点")
    return when


def next_due(rule: str, due: datetime, now: datetime, zone: ZoneInfo) -> datetime:
    """The first instant of ``rule`` after both ``due`` (the time that fired) and ``now``: missed ones are
    skipped, so a reminder fires once for a stretch the bot was down."""
    after = max(due, now)
    kind, *args = rule.split()
    if kind == "interval":
        step = timedelta(seconds=int(args[0]))
        missed = int((after - due) / step)
        nxt = due + step * (missed + 1)
        return nxt if nxt > after else nxt + step
    at = time.fromisoformat(args[-1])
    weekday = int(args[0]) if kind == "weekly" else None
    return _next_clock(at, after, zone, weekday)


def describe_rule(rule: str | None) -> str:
    """``every day at 09:00``, ``every Monday at 09:00``, ``every 2 h``; "" for a one-off."""
    if not rule:
        return ""
    kind, *args = rule.split()
    if kind == "daily":
        return f"every day at {args[0]}"
    if kind == "weekly":
        return f"every {_DAY_NAMES[int(args[0])]} at {args[1]}"
    seconds = int(args[0])
    if seconds % 86400 == 0:
        return f"every {seconds // 86400} day(s)"
    if seconds % 3600 == 0:
        return "every hour" if seconds == 3600 else f"every {seconds // 3600} hours"
    if seconds % 60 == 0:
        return "every minute" if seconds == 60 else f"every {seconds // 60} minutes"
    return f"every {seconds} s"
