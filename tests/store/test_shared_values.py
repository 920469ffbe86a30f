"""shared_values: one refresh claim at a time, values every caller reads (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from store.shared_values import SharedValues


async def test_setdefault_keeps_the_first_value(store):
    values = SharedValues(store)
    assert await values.setdefault("key", "first") == "first"
    assert await values.setdefault("key", "second") == "first"
    found = await values.get("key")
    assert found is not None and found.value == "first" and found.fresh()


async def test_one_claim_at_a_time_until_a_value_is_put_or_released(store):
    values = SharedValues(store)
    claims = await asyncio.gather(*(values.claim("token", margin=300, lease=30) for _ in range(5)))
    assert claims.count(True) == 1
    await values.put("token", "t1", datetime.now(UTC) + timedelta(hours=2))
    assert await values.claim("token", margin=300, lease=30) is False  # fresh: nothing to refresh
    assert (await values.get("token")).value == "t1"
    # a value found bad is replaced once: the first caller claims, the next sees it replaced
    assert await values.claim("token", margin=300, lease=30, replacing="t1") is True
    assert await values.claim("token", margin=300, lease=30, replacing="t1") is False  # held
    await values.put("token", "t2", datetime.now(UTC) + timedelta(hours=2))
    assert await values.claim("token", margin=300, lease=30, replacing="t1") is False  # replaced already
    # a failed refresh lets the next caller try; an expired lease too (its holder died)
    assert await values.claim("token", margin=3 * 3600, lease=30) is True
    await values.release("token")
    assert await values.claim("token", margin=3 * 3600, lease=0) is True
    assert await values.claim("token", margin=3 * 3600, lease=30) is True


async def test_a_value_near_its_expiry_is_stale(store):
    values = SharedValues(store)
    await values.put("token", "old", datetime.now(UTC) + timedelta(seconds=100))
    found = await values.get("token")
    assert found.fresh(0) and not found.fresh(300)
    assert await values.claim("token", margin=300, lease=30) is True
