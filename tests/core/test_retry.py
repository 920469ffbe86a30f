"""Tests for core/retry.py: the one retry policy (tenacity's stop and wait), and the server's wait honoured."""

from __future__ import annotations

import asyncio

import pytest

from core.errors import AuthLLMError, TransientLLMError
from core.retry import DATABASE, DELIVERY, FLOOD_LIMIT, MODEL_CALL, ONE_TRY, SUMMARY_CALL, RetryPolicy


class Flaky:
    """Fails with the queued errors, in order, then answers "ok"; counts its calls."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


class Sleeps(list):
    """A fake ``asyncio.sleep`` that records the waits instead of taking them."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def transient(exc: BaseException) -> bool:
    return isinstance(exc, TransientLLMError)


def busy(retry_after: float | None = None) -> TransientLLMError:
    return TransientLLMError("busy", status=503 if retry_after is None else 429, retry_after=retry_after)


# --- the waits ------------------------------------------------------------------------------------

def test_the_backoff_doubles_with_jitter_up_to_its_cap():
    policy = RetryPolicy(first=1.0, cap=5.0)
    for _ in range(50):
        assert 0.5 <= policy.delay(1) <= 1.0
        assert 1.0 <= policy.delay(2) <= 2.0
        assert 2.0 <= policy.delay(3) <= 4.0
        assert 2.5 <= policy.delay(4) <= 5.0
        assert 2.5 <= policy.delay(10_000) <= 5.0  # no overflow on an unbounded policy's thousandth retry
    assert {policy.delay(3) for _ in range(20)} != {policy.delay(3)}  # jittered


def test_without_jitter_the_waits_are_exact():
    assert [RetryPolicy(first=1.0, cap=60.0, jitter=False).delay(n) for n in (1, 2, 3, 7, 8)] == [
        1.0, 2.0, 4.0, 60.0, 60.0]
    assert [DATABASE.delay(n) for n in (1, 2, 30)] == [1.0, 1.0, 1.0]


def test_the_servers_wait_is_taken_as_given_even_past_the_cap():
    assert MODEL_CALL.delay(1, 7.0) == 7.0
    assert MODEL_CALL.delay(3, 90.0) == 90.0  # the cap bounds our backoff, not the server's wish
    assert MODEL_CALL.delay(2, 0.0) == 0.0
    assert MODEL_CALL.delay(2, -3.0) == 0.0


def test_the_policies_of_the_layers():
    assert (MODEL_CALL.attempts, MODEL_CALL.deadline) == (3, 45.0)
    assert (SUMMARY_CALL.attempts, ONE_TRY.attempts, FLOOD_LIMIT.attempts) == (3, 1, 3)
    assert DELIVERY.attempts is None and DELIVERY.cap == 60.0
    assert DATABASE.attempts == 31  # the first try and 30 retries


# --- tenacity: stop, wait, reraise ----------------------------------------------------------------

async def test_retries_until_it_succeeds_and_waits_the_backoff():
    sleeps = Sleeps()
    call = Flaky(busy(), busy())
    assert await RetryPolicy(first=1.0, jitter=False).retrying(transient, sleep=sleeps)(call) == "ok"
    assert call.calls == 3
    assert sleeps == [1.0, 2.0]


async def test_gives_up_after_its_attempts_with_the_last_error_itself():
    sleeps = Sleeps()
    last = busy()
    call = Flaky(busy(), busy(), last, busy())
    with pytest.raises(TransientLLMError) as raised:
        await MODEL_CALL.retrying(transient, sleep=sleeps)(call)
    assert raised.value is last  # not tenacity's RetryError
    assert call.calls == 3 and len(sleeps) == 2


async def test_retry_after_is_honoured_between_tries():
    sleeps = Sleeps()
    call = Flaky(busy(retry_after=7.0), busy(retry_after=2.5))
    assert await MODEL_CALL.retrying(transient, sleep=sleeps)(call) == "ok"
    assert sleeps == [7.0, 2.5]


async def test_a_layer_reads_its_own_servers_wait():
    class Flood(Exception):
        def __init__(self, seconds: float) -> None:
            super().__init__(f"retry after {seconds}")
            self.seconds = seconds

    sleeps = Sleeps()
    call = Flaky(Flood(3.0), OSError("reset"))
    policy = DELIVERY.but(jitter=False)
    retrying = policy.retrying(lambda exc: True, hint=lambda exc: exc.seconds if isinstance(exc, Flood) else None,
                               sleep=sleeps)
    assert await retrying(call) == "ok"
    assert sleeps == [3.0, 2.0]  # the platform's wait, then the backoff of the second retry


async def test_other_failures_are_not_retried():
    sleeps = Sleeps()
    call = Flaky(AuthLLMError("bad key", status=401))
    with pytest.raises(AuthLLMError):
        await MODEL_CALL.retrying(transient, sleep=sleeps)(call)
    assert call.calls == 1 and sleeps == []


async def test_a_cancellation_is_never_retried_even_when_the_predicate_takes_everything():
    sleeps = Sleeps()
    call = Flaky(asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await DELIVERY.retrying(lambda exc: True, sleep=sleeps)(call)
    assert call.calls == 1 and sleeps == []


async def test_no_wait_may_pass_the_deadline():
    sleeps = Sleeps()
    call = Flaky(busy(retry_after=50.0))
    with pytest.raises(TransientLLMError):
        await MODEL_CALL.retrying(transient, sleep=sleeps)(call)  # 50 s would end past the 45 s deadline
    assert call.calls == 1 and sleeps == []
    call = Flaky(busy(retry_after=40.0))
    assert await MODEL_CALL.retrying(transient, sleep=sleeps)(call) == "ok"
    assert sleeps == [40.0]


async def test_an_unbounded_policy_tries_until_it_succeeds():
    sleeps = Sleeps()
    call = Flaky(*(OSError("down") for _ in range(40)))
    assert await DELIVERY.retrying(lambda exc: isinstance(exc, OSError), sleep=sleeps)(call) == "ok"
    assert call.calls == 41
    assert max(sleeps) <= 60.0 and sleeps[-1] >= 30.0


async def test_one_try_is_one_call():
    call = Flaky(busy())
    with pytest.raises(TransientLLMError):
        await ONE_TRY.retrying(transient, sleep=Sleeps())(call)
    assert call.calls == 1


async def test_before_sleep_sees_the_failure_and_the_wait():
    seen: list[tuple[int, str, float]] = []
    call = Flaky(busy(retry_after=1.5))
    retrying = MODEL_CALL.retrying(transient, sleep=Sleeps(), before_sleep=lambda state: seen.append(
        (state.attempt_number, str(state.outcome.exception()), state.upcoming_sleep)))
    assert await retrying(call) == "ok"
    assert seen == [(1, "busy", 1.5)]


async def test_real_sleeps_are_taken():
    call = Flaky(busy(retry_after=0.2))
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await MODEL_CALL.retrying(transient)(call) == "ok"
    assert loop.time() - started >= 0.2


# --- call: the first try outside tenacity ----------------------------------------------------------

async def test_call_returns_the_first_answer():
    call = Flaky()
    assert await MODEL_CALL.call(call, retry_on=transient, sleep=Sleeps()) == "ok"
    assert call.calls == 1


async def test_call_retries_as_the_policy_says_after_a_first_failure():
    sleeps = Sleeps()
    seen: list[int] = []
    call = Flaky(busy(retry_after=7.0), busy())
    policy = MODEL_CALL.but(first=1.0, jitter=False)
    assert await policy.call(call, retry_on=transient, sleep=sleeps,
                             before_sleep=lambda state: seen.append(state.attempt_number)) == "ok"
    assert call.calls == 3
    assert sleeps == [7.0, 2.0]  # the server's wait, then the backoff of the second retry
    assert seen == [1, 2]  # the first try counts as tenacity's first attempt


async def test_call_gives_up_after_its_attempts_with_the_last_error():
    sleeps = Sleeps()
    errors = [busy(), busy(), busy(), busy()]
    call = Flaky(*errors)
    with pytest.raises(TransientLLMError) as raised:
        await MODEL_CALL.call(call, retry_on=transient, sleep=sleeps)
    assert raised.value is errors[2]
    assert call.calls == 3 and len(sleeps) == 2
    first = busy()
    call = Flaky(first)
    with pytest.raises(TransientLLMError) as raised:
        await ONE_TRY.call(call, retry_on=transient, sleep=sleeps)
    assert raised.value is first and call.calls == 1


async def test_call_does_not_retry_what_the_layer_does_not_own():
    call = Flaky(AuthLLMError("bad key", status=401))
    with pytest.raises(AuthLLMError):
        await MODEL_CALL.call(call, retry_on=transient, sleep=Sleeps())
    assert call.calls == 1


async def test_calls_deadline_counts_from_the_first_try():
    class Slow(Flaky):
        async def __call__(self) -> str:
            await asyncio.sleep(0.3)
            return await super().__call__()

    sleeps = Sleeps()
    call = Slow(busy(retry_after=0.3))
    with pytest.raises(TransientLLMError):  # 0.3 s spent + a 0.3 s wait would pass the 0.5 s deadline
        await MODEL_CALL.but(deadline=0.5).call(call, retry_on=transient, sleep=sleeps)
    assert call.calls == 1 and sleeps == []
    call = Slow(busy(retry_after=0.3))
    assert await MODEL_CALL.but(deadline=1.0).call(call, retry_on=transient, sleep=sleeps) == "ok"
    assert call.calls == 2 and sleeps == [0.3]


async def test_call_passes_its_arguments_to_every_try():
    got: list[tuple] = []

    async def call(a: int, b: str) -> str:
        got.append((a, b))
        if len(got) < 2:
            raise busy()
        return "ok"

    assert await MODEL_CALL.call(call, 1, "x", retry_on=transient, sleep=Sleeps()) == "ok"
    assert got == [(1, "x"), (1, "x")]
