"""store/usage.py on SQLite and PostgreSQL: the sums the caps read, the console's days, and the roll-up of rows
older than 400 days into ``usage_daily`` (by the cleanup job)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from config.settings import Config
from store.retention import CleanupJob
from store.store import Store
from store.usage import USAGE_ROW_DAYS, UsageStore, Who

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def row(at: datetime, session: str = "telegram:1", user: str = "telegram:1", model: str = "m", purpose: str = "reply",
        prompt: int = 10, completion: int = 1, cached: int = 0) -> dict:
    return {"session_id": session, "user_id": user, "model": model, "purpose": purpose, "prompt_tokens": prompt,
            "completion_tokens": completion, "cached_tokens": cached, "created_at": at}


async def test_sums_by_speaker_chat_group_and_bot(store: Store) -> None:
    usage = UsageStore(store)
    since = NOW - timedelta(hours=1)
    await usage.add([
        row(NOW, "telegram:group:-5:1", "telegram:1", prompt=100, completion=10),
        row(NOW, "telegram:group:-5:2", "telegram:2", prompt=200, completion=20),
        row(NOW, "telegram:group:-5", "telegram:3", prompt=1, completion=0),
        row(NOW, "telegram:group:-50:1", "telegram:1", prompt=1000, completion=0),  # another group, same prefix
        row(NOW, "telegram:1", "telegram:1", prompt=7, completion=3),
        row(since - timedelta(seconds=1), "telegram:1", "telegram:1", prompt=5000),  # before the period
        row(NOW, "telegram:group:a_b%", "telegram:4", prompt=4, completion=0),  # LIKE's wildcards are text
        row(NOW, "telegram:group:axb%:9", "telegram:4", prompt=40, completion=0),
        row(NOW, "wechat:group:Team:1", "wechat:1", prompt=8, completion=0),  # WeChat names: case matters
        row(NOW, "wechat:group:team:2", "wechat:2", prompt=16, completion=0),
    ])
    assert await usage.tokens_since(since, Who(group="wechat:group:team")) == 16
    assert await usage.tokens_since(since, Who(user_id="telegram:1")) == 110 + 1000 + 10
    assert await usage.tokens_since(since, Who(group="telegram:group:-5")) == 110 + 220 + 1
    assert await usage.tokens_since(since, Who(group="telegram:group:a_b%")) == 4
    assert await usage.tokens_since(since, Who(session_id="telegram:1")) == 10
    assert await usage.tokens_since(since) == 110 + 220 + 1 + 1000 + 10 + 4 + 40 + 8 + 16


async def test_the_consoles_days_in_the_zone(store: Store) -> None:
    usage = UsageStore(store)
    midnight = datetime(2026, 11, 25, 23, 0, tzinfo=UTC)  # 00:00 in Berlin on the 26th
    await usage.add([
        row(midnight - timedelta(seconds=1), prompt=50, completion=5),  # the 25th in Berlin
        row(midnight, "telegram:1", "telegram:1", "big", "reply", 1000, 100, 800),
        row(midnight + timedelta(hours=2), "telegram:2", "telegram:2", "big", "reply", 600, 50, 0),
        row(midnight + timedelta(hours=3), "telegram:2", "", "small", "summary", 400, 40, 200),
    ])
    today, yesterday, before = await usage.days(BERLIN, 3, today=NOW)
    assert today.day == "2026-11-26"
    assert today.by_model == [("big", "reply", 2, 1750, 800), ("small", "summary", 1, 440, 200)]
    assert today.top_sessions == [("telegram:1", 1100), ("telegram:2", 1090)]
    assert today.top_people == [("telegram:1", 1100), ("telegram:2", 650)]
    assert (today.prompt_tokens, today.cached_tokens, today.total) == (2000, 1000, 2190)
    assert today.cache_share == 0.5
    assert (yesterday.day, yesterday.total, yesterday.cache_share) == ("2026-11-25", 55, 0.0)
    assert (before.day, before.by_model, before.cache_share) == ("2026-11-24", [], None)


async def test_rows_older_than_400_days_are_summed_per_day(store: Store, tmp_path: Path) -> None:
    usage = UsageStore(store)
    edge = NOW - timedelta(days=USAGE_ROW_DAYS)
    old_evening = datetime(2025, 10, 1, 22, 30, tzinfo=UTC)  # 00:30 on 2 October in Berlin
    await usage.add([
        row(old_evening, prompt=10, completion=1, cached=4),
        row(old_evening + timedelta(minutes=5), prompt=20, completion=2, cached=8),
        row(old_evening - timedelta(hours=1), prompt=30, completion=3),  # 23:30 on 1 October in Berlin
        row(old_evening, purpose="summary", user="", prompt=5, completion=5),
        row(edge, prompt=99, completion=9),  # exactly 400 days old: kept as it is
    ])
    job = CleanupJob(store, lambda: Config(data_dir=str(tmp_path), timezone="Europe/Berlin"), usage=usage)
    stats = await job.run_once(now=NOW)
    assert stats.usage_rows == 4
    assert await usage.daily_sums() == [
        ("2025-10-01", "telegram:1", "telegram:1", "m", "reply", 1, 30, 3, 0),
        ("2025-10-02", "telegram:1", "", "m", "summary", 1, 5, 5, 0),
        ("2025-10-02", "telegram:1", "telegram:1", "m", "reply", 2, 30, 3, 12),
    ]
    assert await usage.tokens_since(datetime(2000, 1, 1, tzinfo=UTC)) == 108
    # a later run adds to a day's sums instead of writing a second row
    await usage.add([row(old_evening + timedelta(minutes=9), prompt=1, completion=1, cached=1)])
    assert await usage.roll_up(BERLIN, NOW, batch=1) == 1
    assert (await usage.daily_sums())[-1] == ("2025-10-02", "telegram:1", "telegram:1", "m", "reply", 3, 31, 4, 13)
    assert await usage.roll_up(BERLIN, NOW) == 0


async def test_forget_leaves_the_usage_rows(store: Store, tmp_path: Path) -> None:
    from core.records import SessionInfo
    from memory.daily import DailyMemory
    from memory.forget import forget_session

    usage = UsageStore(store)
    await store.sessions.ensure(SessionInfo("telegram:1", "telegram", "1", "1"))
    await usage.add([row(NOW, prompt=100, completion=10)])
    report = await forget_session(store, DailyMemory(tmp_path / "memory", UTC), "telegram:1")
    assert "usage" not in report.rows and report.rows["sessions"] == 1
    assert await usage.tokens_since(NOW, Who(user_id="telegram:1")) == 110  # /forget does not undo the spending
