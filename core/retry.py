"""One retry policy for the whole bot, over ``tenacity``.

A :class:`RetryPolicy` says how often a call is tried and how long to wait between the tries: the
server's own wait when it gives one (``Retry-After``, Telegram's ``retry_after``), else exponential
backoff with jitter; optionally a deadline that no wait may pass. :meth:`RetryPolicy.retrying` turns it
into a ``tenacity.AsyncRetrying``; :meth:`RetryPolicy.call` runs a call under it, awaiting the first try
directly: tenacity's machinery costs about 25 us of CPU per call (bench/retry_overhead.py), and nearly
every call succeeds at once, so it takes over only after a failure worth retrying.

Each kind of failure is retried by one layer only, so the tries of two layers never multiply:

=============================== ============================================ =================================
failure                         retried by                                   policy
=============================== ============================================ =================================
a transient model error         the model client (``agent/llm.py``)          :data:`MODEL_CALL`
(timeout, connection, 429, 5xx)
... of a summary request        the summariser (``summaries/summarizer.py``, :data:`SUMMARY_CALL`; the client
                                which journals each try)                     then tries once (:data:`ONE_TRY`)
a Telegram flood limit (429)    python-telegram-bot's ``AIORateLimiter``     :data:`FLOOD_LIMIT`
a reply the platform did not    the outbox (``dispatcher/outbox.py``)        :data:`DELIVERY`: until it is sent
take (5xx, timeout, network)
the database went away          ``dispatcher/db_retry.py``                   :data:`DATABASE`
a long poll or QR login that    the channel's receive loop                   :data:`RECEIVE`: until it answers
cannot reach the platform       (``channels/weixin/channel.py``)
=============================== ============================================ =================================
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    stop_never,
)
from tenacity.wait import wait_base

from core.errors import TransientLLMError

T = TypeVar("T")
#: A function that reads the server's own wait (seconds) from a failure, or None when it gave none.
Hint = Callable[[BaseException], float | None]
#: What a layer logs before it waits for its next try.
BeforeSleep = Callable[[RetryCallState], Any]


def retry_after(exc: BaseException) -> float | None:
    """A model error's ``Retry-After`` (seconds), or None."""
    return exc.retry_after if isinstance(exc, TransientLLMError) else None


def no_hint(exc: BaseException) -> float | None:
    """The failure carries no wait of the server's."""
    return None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often to try and how long to wait between tries."""

    #: tries in total (the first and the retries); None: until it succeeds or the task is cancelled
    attempts: int | None = 3
    #: the computed wait before the first retry (seconds) ...
    first: float = 0.5
    #: ... multiplied by this for each further retry ...
    factor: float = 2.0
    #: ... and never longer than this (a server's own wait may be longer: it is honoured as given)
    cap: float = 20.0
    #: wait a random 50-100% of the computed wait, so clients that failed together do not retry together
    jitter: bool = True
    #: a retry whose wait would end this many seconds or more after the first try is not taken
    deadline: float | None = None

    def but(self, **changes: Any) -> RetryPolicy:
        """This policy with some fields changed (a test's short waits, a caller's deadline)."""
        return replace(self, **changes)

    def delay(self, retry: int, hint: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1-based): the server's ``hint`` when it gave one,
        else the backoff."""
        if hint is not None:
            return max(hint, 0.0)
        computed = min(self.cap, self.first * self.factor ** min(retry - 1, 64))
        return computed * (0.5 + random.random() / 2) if self.jitter else computed

    def retrying(self, retry_on: Callable[[BaseException], bool], *, hint: Hint = retry_after,
                 before_sleep: BeforeSleep | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> AsyncRetrying:
        """A ``tenacity.AsyncRetrying`` for this policy: it retries the failures for which ``retry_on`` is
        true (never a cancellation), and raises the last failure itself when it gives up."""
        stop = stop_never if self.attempts is None else stop_after_attempt(self.attempts)
        if self.deadline is not None:
            stop = stop | stop_before_delay(self.deadline)
        return AsyncRetrying(
            stop=stop, wait=_Wait(self, hint), sleep=sleep, before_sleep=before_sleep, reraise=True,
            retry=retry_if_exception(lambda exc: isinstance(exc, Exception) and retry_on(exc)))


    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any, retry_on: Callable[[BaseException], bool],
                   hint: Hint = retry_after, before_sleep: BeforeSleep | None = None,
                   sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> T:
        """``await fn(*args)``, retried as :meth:`retrying` says. The first try is awaited directly; after a
        failure worth retrying, tenacity goes on from it (its first attempt is that failure, and the
        deadline counts from the first try)."""
        started = time.monotonic()
        try:
            return await fn(*args)
        except Exception as exc:
            if self.attempts == 1 or not retry_on(exc):
                raise
            failure: BaseException | None = exc
        policy = self
        if self.deadline is not None:
            policy = self.but(deadline=self.deadline - (time.monotonic() - started))

        async def again(*args: Any) -> T:
            nonlocal failure
            if failure is not None:
                exc, failure = failure, None
                raise exc
            return await fn(*args)

        return await policy.retrying(retry_on, hint=hint, before_sleep=before_sleep, sleep=sleep)(again, *args)


class _Wait(wait_base):
    """The policy's wait as a tenacity wait strategy: it reads the server's wait from the last failure."""

    def __init__(self, policy: RetryPolicy, hint: Hint) -> None:
        self.policy = policy
        self.hint = hint

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        failure = outcome.exception() if outcome is not None and outcome.failed else None
        return self.policy.delay(retry_state.attempt_number, self.hint(failure) if failure is not None else None)


#: A call that is tried once: its caller owns the retries.
ONE_TRY = RetryPolicy(attempts=1)
#: The model client: 3 tries, 0.5 s then 1 s (jittered), a server's Retry-After honoured, and no wait
#: that would end 45 s after the first try: a user is waiting for the answer.
MODEL_CALL = RetryPolicy(attempts=3, first=0.5, cap=20.0, deadline=45.0)
#: A summary request (in the background): 3 tries in all, about 1 s and 2 s apart, a Retry-After honoured
#: within two minutes; then the rule-based fallback.
SUMMARY_CALL = RetryPolicy(attempts=3, first=1.0, cap=30.0, deadline=120.0)
#: A Telegram flood limit: the request is tried 3 times, each after the wait Telegram asked for.
FLOOD_LIMIT = RetryPolicy(attempts=3)
#: A reply: sent until the platform takes it, 1 s doubling to a minute; the platform's own wait is honoured.
DELIVERY = RetryPolicy(attempts=None, first=1.0, cap=60.0)
#: A receive loop (long poll, QR login) that cannot reach its platform: tried until it answers, 1 s doubling to
#: 30 s (jittered), so a bot left running through an outage polls again within half a minute of its end.
RECEIVE = RetryPolicy(attempts=None, first=1.0, cap=30.0)
#: The database went away (a PostgreSQL restart takes seconds): 30 retries, 1 s apart.
DATABASE = RetryPolicy(attempts=31, first=1.0, factor=1.0, cap=1.0, jitter=False)
