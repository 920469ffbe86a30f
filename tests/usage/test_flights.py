"""usage/caps.py: turns in flight count against the caps, in this process and in others on the same database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from config.settings import Config
from core.records import SessionInfo
from store.store import Store
from store.usage import FLIGHT_TTL, UsageStore
from usage.caps import UsageCaps

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
ALICE = SessionInfo("telegram:1", "telegram", "1", "1")
BOB = SessionInfo("telegram:2", "telegram", "2", "2")


def reply_row(user: str, tokens: int, at: datetime = NOW) -> dict:
    return {"session_id": user, "user_id": user, "model": "m", "purpose": "reply", "prompt_tokens": tokens,
            "completion_tokens": 0, "cached_tokens": 0, "created_at": at}


async def test_turns_in_flight_count_as_an_average_reply_until_they_end(store: Store,
                                                                       tmp_path: Path) -> None:
    usage = UsageStore(store)
    cfg = Config(data_dir=str(tmp_path), timezone="UTC", usage_cap_user_daily_tokens=250)
    here, there = UsageCaps(usage, lambda: cfg), UsageCaps(usage, lambda: cfg)  # two processes
    await usage.add([reply_row("telegram:1", 100)])
    async with here.turn("telegram:1", ALICE, is_admin=False, now=NOW) as first:
        assert first.decision.refusal is None
        async with there.turn("telegram:1", ALICE, is_admin=False, now=NOW) as second:
            assert second.decision.refusal is None  # 100 used + 100 in flight < 250
            async with here.turn("telegram:1", ALICE, is_admin=False, now=NOW) as third:
                assert third.decision.cap == "user"  # 100 used + 200 in flight
            async with there.turn("telegram:2", BOB, is_admin=False, now=NOW) as bob:
                assert bob.decision.refusal is None  # the person cap is Alice's
            async with here.turn("telegram:1", ALICE, is_admin=True, now=NOW) as admin:
                assert admin.decision.refusal is None
        first.tally[0] = 200  # what the recorder adds up while the turn runs
    async with here.turn("telegram:1", ALICE, is_admin=False, now=NOW) as again:
        assert again.decision.refusal is None  # the others ended: 100 used
        async with there.turn("telegram:1", ALICE, is_admin=False, now=NOW) as more:
            assert more.decision.refusal is not None  # here expects 200 (its last turn spent that much)...
    async with there.turn("telegram:1", ALICE, is_admin=False, now=NOW) as other:
        assert other.decision.refusal is None
        async with here.turn("telegram:1", ALICE, is_admin=False, now=NOW) as last:
            assert last.decision.refusal is None  # ...there expects the average reply, 100: 100 + 100 + 0 < 250


async def test_a_flight_left_by_a_dead_process_expires(store: Store, tmp_path: Path) -> None:
    usage = UsageStore(store)
    cfg = Config(data_dir=str(tmp_path), timezone="UTC", usage_cap_daily_tokens=150)
    caps = UsageCaps(usage, lambda: cfg)
    await usage.add([reply_row("telegram:1", 100)])
    await usage.begin_flight("telegram:9", None, 100, NOW)  # its process was killed mid-turn
    async with caps.turn("telegram:2", BOB, is_admin=False, now=NOW) as turn:
        assert turn.decision.cap == "bot"
    later = NOW + FLIGHT_TTL + timedelta(seconds=1)
    async with caps.turn("telegram:2", BOB, is_admin=False, now=later) as turn:
        assert turn.decision.refusal is None
    await usage.roll_up(UTC, later)
    assert (await usage.cap_state(NOW, "telegram:9", None, NOW)).bot_flights == 0
