"""reminders/when.py: the forms of DESIGN §1.4 and their Chinese equivalents, in two zones, across DST."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine

from reminders.when import WhenError, describe_rule, next_due, parse_prefix, parse_rule, parse_when

NEW_YORK = ZoneInfo("America/New_York")  # DST starts Sunday 2026-03-08 02:00 (EST -5 -> EDT -4)
SHANGHAI = ZoneInfo("Asia/Shanghai")  # no DST, +8


def local(zone: ZoneInfo, *args: int) -> datetime:
    return datetime(*args, tzinfo=zone)


def now_utc() -> datetime:
    return datetime.now(UTC)


# Saturday 2026-03-07 15:00 local: "tomorrow" is the day DST starts in New York
CASES = [
    ("in 20m", (2026, 3, 7, 15, 20), None),
    ("in 2 hours", (2026, 3, 7, 17, 0), None),
    ("in 1h30m", (2026, 3, 7, 16, 30), None),
    ("at 18:30", (2026, 3, 7, 18, 30), None),
    ("at 9:00", (2026, 3, 8, 9, 0), None),  # passed today: tomorrow
    ("tomorrow 9:00", (2026, 3, 8, 9, 0), None),
    ("tomorrow at 9am", (2026, 3, 8, 9, 0), None),
    ("monday 9:00", (2026, 3, 9, 9, 0), None),
    ("2026-12-24 08:00", (2026, 12, 24, 8, 0), None),
    ("every day 9:00", (2026, 3, 8, 9, 0), "daily 09:00"),
    ("every monday 9:00", (2026, 3, 9, 9, 0), "weekly 0 09:00"),
    ("every week", (2026, 3, 14, 15, 0), "weekly 5 15:00"),
    ("20分钟后", (2026, 3, 7, 15, 20), None),
    ("2小时后", (2026, 3, 7, 17, 0), None),
    ("半小时后", (2026, 3, 7, 15, 30), None),
    ("下午6点半", (2026, 3, 7, 18, 30), None),
    ("今晚8点", (2026, 3, 7, 20, 0), None),
    ("明天早上9点", (2026, 3, 8, 9, 0), None),
    ("明天9:00", (2026, 3, 8, 9, 0), None),
    ("后天上午10点", (2026, 3, 9, 10, 0), None),
    ("周一9点", (2026, 3, 9, 9, 0), None),
    ("下周五下午3点", (2026, 3, 13, 15, 0), None),
    ("12月24日早上8点", (2026, 12, 24, 8, 0), None),
    ("2026年12月24日 8点", (2026, 12, 24, 8, 0), None),
    ("每天早上9点", (2026, 3, 8, 9, 0), "daily 09:00"),
    ("每周一9点", (2026, 3, 9, 9, 0), "weekly 0 09:00"),
]


@pytest.mark.parametrize("zone", [NEW_YORK, SHANGHAI], ids=["new_york", "shanghai"])
@pytest.mark.parametrize(("text", "expected", "rule"), CASES, ids=[c[0] for c in CASES])
def test_forms_resolve_to_the_local_instant(zone, text, expected, rule):
    with time_machine.travel(local(zone, 2026, 3, 7, 15, 0), tick=False):
        when = parse_when(text, now_utc(), zone)
    assert when.due == local(zone, *expected).astimezone(UTC)
    assert when.every == rule


def test_tomorrow_9_across_the_dst_change_keeps_the_wall_clock():
    with time_machine.travel(local(NEW_YORK, 2026, 3, 7, 15, 0), tick=False):
        tomorrow = parse_when("tomorrow 9:00", now_utc(), NEW_YORK).due
        chinese = parse_when("明天早上9点", now_utc(), NEW_YORK).due
    assert tomorrow == chinese == datetime(2026, 3, 8, 13, 0, tzinfo=UTC)  # 09:00 EDT, not 14:00 UTC (EST)
    # durations are absolute: 20 hours after 15:00 EST is 12:00 EDT (the clock skipped an hour)
    with time_machine.travel(local(NEW_YORK, 2026, 3, 7, 15, 0), tick=False):
        due = parse_when("in 20 hours", now_utc(), NEW_YORK).due
    assert due == datetime(2026, 3, 8, 16, 0, tzinfo=UTC) and due.astimezone(NEW_YORK).hour == 12


def test_daily_rule_keeps_9_00_across_the_autumn_change():
    due = local(NEW_YORK, 2026, 10, 31, 9, 0).astimezone(UTC)  # EDT; DST ends 2026-11-01 02:00
    following = next_due("daily 09:00", due, due + timedelta(seconds=1), NEW_YORK)
    assert following == datetime(2026, 11, 1, 14, 0, tzinfo=UTC)  # 09:00 EST
    assert following.astimezone(NEW_YORK).hour == 9


def test_next_due_skips_what_was_missed_and_fires_once():
    due = local(SHANGHAI, 2026, 3, 1, 9, 0).astimezone(UTC)
    now = local(SHANGHAI, 2026, 3, 5, 12, 0).astimezone(UTC)  # down for four days
    assert next_due("daily 09:00", due, now, SHANGHAI) == local(SHANGHAI, 2026, 3, 6, 9, 0).astimezone(UTC)
    assert next_due("weekly 0 09:00", due, now, SHANGHAI) == local(SHANGHAI, 2026, 3, 9, 9, 0).astimezone(UTC)
    assert next_due("interval 3600", due, now, SHANGHAI) == local(SHANGHAI, 2026, 3, 5, 13, 0).astimezone(UTC)


def test_the_rest_is_the_reminders_text():
    now = local(SHANGHAI, 2026, 3, 7, 15, 0).astimezone(UTC)
    assert parse_prefix("tomorrow 9:00 call mum", now, SHANGHAI)[1] == "call mum"
    assert parse_prefix("in 20m to take the cake out", now, SHANGHAI)[1] == "take the cake out"
    assert parse_prefix("明天早上9点提醒我给妈妈打电话", now, SHANGHAI)[1] == "给妈妈打电话"
    assert parse_prefix("每天早上9点 吃药", now, SHANGHAI)[1] == "吃药"


def test_a_time_that_has_passed_is_said_so():
    now = local(SHANGHAI, 2026, 3, 7, 15, 0).astimezone(UTC)
    for text in ("today 8:00", "2026-01-01 08:00", "今天早上8点"):
        with pytest.raises(WhenError, match="^that time has passed"):
            parse_when(text, now, SHANGHAI)


def test_unreadable_when_gets_examples():
    now = local(SHANGHAI, 2026, 3, 7, 15, 0).astimezone(UTC)
    for text in ("soonish", "5 things", "2026-02-30 08:00", "25:00"):
        with pytest.raises(WhenError) as err:
            parse_when(text, now, SHANGHAI)
        assert "Examples:" in str(err.value) or "not a" in str(err.value)
    with pytest.raises(WhenError, match="Examples: in 20m, at 18:30, tomorrow 9:00"):
        parse_when("soonish", now, SHANGHAI)
    with pytest.raises(WhenError, match="left over"):
        parse_when("tomorrow 9:00 call mum", now, SHANGHAI)
    with pytest.raises(WhenError, match="too far ahead"):
        parse_when("in 9999 days", now, SHANGHAI)
    with pytest.raises(WhenError, match="at most once a minute"):
        parse_when("every 10s", now, SHANGHAI)


def test_rule_given_apart_and_described():
    now = local(SHANGHAI, 2026, 3, 7, 15, 0).astimezone(UTC)
    assert parse_rule("day 9:00", SHANGHAI, now).every == "daily 09:00"
    assert parse_rule("monday 9:00", SHANGHAI, now).every == "weekly 0 09:00"
    assert parse_rule("2 hours", SHANGHAI, now).every == "interval 7200"
    assert parse_rule("每天早上9点", SHANGHAI, now).every == "daily 09:00"
    with pytest.raises(WhenError, match="not a repeat rule"):
        parse_rule("tomorrow 9:00", SHANGHAI, now)
    assert describe_rule("daily 09:00") == "every day at 09:00"
    assert describe_rule("weekly 0 09:00") == "every Monday at 09:00"
    assert describe_rule("interval 7200") == "every 2 hours"
    assert describe_rule(None) == ""
