"""Background summary jobs (DESIGN §3): journalled, one at a time per session, injected on the event loop.

A job covers the messages ``from_seq..through_seq`` of a session that left its context (reasons ``trim``,
``restore``, ``overflow``, ``clear``, ``compact``). Its life:

1. :meth:`Summarizer.submit` journals it (``summary_jobs`` row) and queues it; the caller never waits.
2. The session's worker runs its jobs in submission order; different sessions run concurrently, at most
   ``concurrency`` at once.
3. Only messages after the session's ``summarized_through_seq`` are read, so each message is summarised
   at most once (no text-hash dedup: a repeated "ok" is still summarised). Nothing new: the job is skipped.
4. The summary model (no tools, temperature 0, ``summary_model`` or ``model``) reads the messages' transcript
   in as many calls as its window needs (:mod:`summaries.parts`: parts of at most 40% of the window,
   merged; an overflow splits further), each answer capped. The earlier summary is not sent: the result
   holds what is new in these turns. A failed call is retried here, and only here (at most 3 model calls
   per request: :data:`core.retry.SUMMARY_CALL`, the client trying once); then a rule-based fallback
   (see :mod:`summaries.text`) is used.
5. Lines of the model's summary that quote the user saying what no user text (nor the earlier summary) holds
   are dropped (:mod:`summaries.quotes`). The summary check (:mod:`summaries.facts`): facts of the users'
   texts that the summary lost are appended as verbatim ``- (kept) …`` lines; the share kept is logged and
   remembered for ``/context``.
6. The result (lines the rolling summary already holds left out) is appended to the session's daily
   memory file; "none" with nothing kept writes nothing.
7. Except for ``clear``, the result is added to the session's rolling summary (:func:`roll_summary`:
   earlier lines then new ones, capped, newest kept), which becomes its injected summary: persisted, then
   set on the live :class:`~agent.session.SessionState` by plain assignments (no await in between), which
   the running turn picks up at its next model call. A ``clear`` job writes memory only and leaves the
   summary reset; jobs submitted before a clear (``/context clear``, or an overflow that cleared the
   context) no longer inject: a cleared context starts empty. ``summarized_through_seq`` always advances.
8. The job is marked done. A crash before that re-runs it at the next :meth:`Summarizer.start`
   (at-least-once; step 3 makes a re-run harmless once the injection happened). :meth:`Summarizer.settled`
   lets the first reply after a restart wait for the jobs of its session.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from core.errors import AuthLLMError, ContextOverflowError, ModelNotFoundError, NotConfiguredError, QuotaLLMError
from core.llm import BaseLLM
from core.records import SessionRecord
from core.retry import ONE_TRY, SUMMARY_CALL, RetryPolicy
from core.usage import usage_scope
from core.workers import KeyedWorkers
from memory.daily import DailyMemory, OnWritten, notify_written
from store.locks import LocalLocks, Locks
from store.models import utcnow
from store.store import Store
from summaries.collaborators import ROUGH, LiveState, SummaryTarget, TextCounter
from summaries.facts import CheckResult, check_summary, with_kept_lines
from summaries.parts import summarise_entries
from summaries.quotes import drop_invented_quotes
from summaries.text import (
    count_turns,
    fallback_summary,
    is_none,
    new_lines,
    part_request,
    roll_summary,
    transcript_entries,
    user_texts,
)

if TYPE_CHECKING:
    from tenacity import RetryCallState

    from config.settings import Config

logger = logging.getLogger(__name__)

REASONS = frozenset({"trim", "restore", "overflow", "clear", "compact"})
#: Errors retrying cannot fix: go straight to the fallback.
_PERMANENT = (NotConfiguredError, AuthLLMError, QuotaLLMError, ModelNotFoundError)
#: The window assumed when no window function is given (tests and tools built without app.py).
DEFAULT_WINDOW = 128_000
#: A summary answer is capped at this many tokens (and never more than its request leaves of the window).
SUMMARY_ANSWER_TOKENS = 1_024
#: Tokens added to a request's estimate for the chat framing of its two messages.
REQUEST_FRAMING_TOKENS = 16
#: The rolling summary keeps at most this share of the main model's window ...
ROLLING_SHARE = 0.1
#: ... and never more than this many tokens.
ROLLING_MAX_TOKENS = 4_000
#: Several processes: a pending job journalled this many seconds ago with no worker is adopted by another process.
ORPHAN_AGE = 60.0
#: Several processes: how often a job waits to retry its session's summary lock held elsewhere (seconds).
LOCK_RETRY_SECONDS = 0.5


def _retryable(exc: BaseException) -> bool:
    """An overflow splits the text further; a refused key, quota or model needs an operator, not a retry."""
    return not isinstance(exc, (ContextOverflowError, *_PERMANENT))


@dataclass(eq=False)
class _Job:
    id: int
    session_id: str
    reason: str
    from_seq: int
    through_seq: int
    epoch: int  # the session's clear count when the job was queued
    done: asyncio.Future | None = None  # set for summarize_now()
    settled: asyncio.Future | None = None  # done when the job has finished or stopped


@dataclass(frozen=True, slots=True)
class Checked:
    """The summary check of a session's last summary, for the log and ``/context``."""

    job_id: int
    reason: str
    found: int  # facts the summary (model or fallback) contained
    total: int  # facts in the users' texts
    kept: int  # verbatim lines appended for the facts it lost
    fallback: bool

    @property
    def share(self) -> float:
        """The share of facts the summary kept (1.0 when there were none)."""
        return self.found / self.total if self.total else 1.0


@dataclass(frozen=True, slots=True)
class _Outcome:
    text: str | None  # what was written to memory
    injected: str | None  # what became the session's summary
    turns: int
    status: str  # summarised, fallback, none, skipped


class Summarizer:
    """Summarises turns that left a session's context into its daily memory and its injected summary."""

    def __init__(
        self,
        *,
        store: Store,
        llm: BaseLLM,
        config: Callable[[], Config],
        sessions: SummaryTarget,
        daily: DailyMemory,
        retry: RetryPolicy = SUMMARY_CALL,
        concurrency: int = 4,
        on_written: OnWritten | None = None,
        counter: Callable[[str], TextCounter] | None = None,
        window: Callable[[str], int] | None = None,
        locks: Locks | None = None,
    ) -> None:
        self.store = store
        self.llm = llm
        self.config = config
        #: the session owner's port: a summary is stored and injected live through it (agent.sessions.LiveSessions)
        self.sessions = sessions
        self.daily = daily
        #: told when a summary becomes a session's injected summary (kind "injected"); may be set later
        self.on_written = on_written
        #: how one summary request is retried (this layer owns it; the client tries once)
        self.retry = retry
        #: ``counter(model)`` is that model's token count function (app.py passes the agent's tokenizer)
        self.counter = counter or (lambda model: ROUGH)
        #: ``window(model)`` is that model's context window (app.py: agent/tokens.py's table and the config)
        self.window = window or (lambda model: DEFAULT_WINDOW)
        #: the check of each session's last summary (the log has them all)
        self.checks: dict[str, Checked] = {}
        #: per session, a future that is done when the jobs queued so far have finished
        self._tails: dict[str, asyncio.Future] = {}
        #: one FIFO worker per session, at most ``concurrency`` jobs running at once
        self._workers: KeyedWorkers[_Job] = KeyedWorkers(self._run_queued, concurrency=concurrency, name="summary")
        #: several processes (DESIGN §10): a session's jobs run under the lock ``summary:<id>``, and each
        #: job once, by whichever process takes it first
        self.locks: Locks = locks or LocalLocks()
        self._queued: set[int] = set()
        self._clears: dict[str, int] = {}
        #: jobs cancelled by drain(): they run first when their session gets a new job, or at start()
        self._stranded: dict[str, list[_Job]] = {}

    # --- public API --------------------------------------------------------------------------
    async def submit(self, session_id: str, reason: str, from_seq: int, through_seq: int) -> None:
        """Journal a job for ``from_seq..through_seq`` and run it in the background; return at once."""
        await self._submit(session_id, reason, from_seq, through_seq, None)

    async def summarize_now(self, session_id: str, reason: str, from_seq: int, through_seq: int) -> str | None:
        """Run a job (journalled, after the session's queued jobs) and return the summary of its turns (what
        its memory section holds); None for "none"."""
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        await self._submit(session_id, reason, from_seq, through_seq, done)
        return await done

    def note_cleared(self, session_id: str) -> None:
        """The session's context was just cleared: jobs queued before now must not inject their summary."""
        self._clears[session_id] = self._clears.get(session_id, 0) + 1

    async def start(self) -> None:
        """Queue the jobs the last process left pending, oldest first."""
        self._stranded.clear()  # they are in the journal too
        count = await self._queue_journalled()
        if count:
            logger.info("resuming %d pending summary job(s)", count)

    async def drain(self, grace: float = 10.0) -> bool:
        """Wait up to ``grace`` s for queued and running jobs; cancel the rest (they stay journalled).

        True if every job finished.
        """
        unfinished = await self._workers.drain(grace)
        if not unfinished:
            return True
        for sid, jobs in unfinished.items():
            self._strand(sid, jobs)
        left_over = sum(len(jobs) for jobs in unfinished.values())
        logger.warning("%d summary job(s) unfinished after %.1fs; they run again at the next start", left_over, grace)
        return False

    def pending(self) -> int:
        """Jobs queued or running."""
        return self._workers.pending()

    def settled(self, session_id: str) -> asyncio.Future | None:
        """A future done when the session's jobs queued so far have finished (or stopped); None if none."""
        tail = self._tails.get(session_id)
        return tail if tail is not None and not tail.done() else None

    # --- queueing ----------------------------------------------------------------------------
    async def _submit(self, session_id: str, reason: str, from_seq: int, through_seq: int,
                      done: asyncio.Future | None) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown summary reason {reason!r}; expected one of {', '.join(sorted(REASONS))}")
        if reason == "clear":  # before any await: a job finishing meanwhile must not inject
            self.note_cleared(session_id)
        job_id = await self.store.jobs.add(session_id, reason, from_seq, through_seq)
        self._enqueue(_Job(job_id, session_id, reason, from_seq, through_seq,
                           self._clears.get(session_id, 0), done))

    def _enqueue(self, job: _Job) -> None:
        for old in self._stranded.pop(job.session_id, []):  # keep submission order
            self._queued.add(old.id)
            self._workers.submit(old.session_id, old)
        self._queued.add(job.id)
        # Jobs of a session run in order, so the newest job's end is the end of all queued so far.
        job.settled = self._tails[job.session_id] = asyncio.get_running_loop().create_future()
        self._workers.submit(job.session_id, job)

    def _settle(self, job: _Job) -> None:
        if job.settled is not None and not job.settled.done():
            job.settled.set_result(None)
        if self._tails.get(job.session_id) is job.settled:
            del self._tails[job.session_id]

    async def adopt_orphans(self, older_than: float = ORPHAN_AGE) -> int:
        """Several processes: queue pending jobs journalled over ``older_than`` s ago that no worker here has
        (a process that died left them); each runs once, wherever it is taken first. Returns how many."""
        count = await self._queue_journalled(utcnow() - timedelta(seconds=older_than))
        if count:
            logger.info("adopted %d pending summary job(s)", count)
        return count

    async def _queue_journalled(self, before: datetime | None = None) -> int:
        """Queue the journal's pending jobs (journalled before ``before``) that no worker here has."""
        jobs = [j for j in await self.store.jobs.pending(before) if j.id not in self._queued]
        for j in jobs:
            if j.reason == "clear":
                self.note_cleared(j.session_id)
            self._enqueue(_Job(j.id, j.session_id, j.reason, j.from_seq, j.through_seq,
                               self._clears.get(j.session_id, 0)))
        return len(jobs)

    async def _run_queued(self, session_id: str, job: _Job) -> None:
        """Run one job on its session's worker and settle its ``done`` future."""
        try:
            if self.locks.shared:
                outcome = await self._run_claimed(job)
            else:
                outcome = await self._run(job)
        except Exception as exc:  # noqa: BLE001 - the job stays journalled for the next start
            logger.exception("summary job %d (session %s) failed; it runs again at the next start",
                             job.id, session_id)
            if job.done is not None and not job.done.done():
                job.done.set_exception(exc)
        else:
            if job.done is not None and not job.done.done():
                job.done.set_result(outcome.text)
        finally:
            self._settle(job)
        self._queued.discard(job.id)

    async def _run_claimed(self, job: _Job) -> _Outcome:
        """Several processes: run the job under its session's summary lock, unless another process ran it."""
        name = f"summary:{job.session_id}"
        # Another process runs a job of this session; a blocking pg_advisory_lock would hold up the one lock
        # connection every claim of this process shares, so poll.
        while not await self.locks.try_acquire(name):  # noqa: ASYNC110
            await asyncio.sleep(LOCK_RETRY_SECONDS)
        try:
            if not await self.store.jobs.is_pending(job.id):
                logger.info("summary job %d (session %s) was run by another process", job.id, job.session_id)
                return _Outcome(None, None, 0, "skipped")
            return await self._run(job)
        finally:
            await self.locks.release(name)

    def _strand(self, session_id: str, jobs: list[_Job]) -> None:
        """Keep jobs cancelled by drain() (still journalled) to run before the session's next job."""
        for job in jobs:
            self._queued.discard(job.id)
            if job.done is not None:
                job.done.cancel()
                job.done = None
            self._settle(job)
            self._stranded.setdefault(session_id, []).append(job)

    # --- one job ----------------------------------------------------------------------------
    async def _run(self, job: _Job) -> _Outcome:
        started = time.perf_counter()
        sid = job.session_id
        record = await self.store.sessions.get(sid)
        state = self._state(sid)
        through = record.summarized_through_seq if record else 0
        if state is not None:
            through = max(through, state.summarized_through_seq)
        first = max(job.from_seq, through + 1)
        stored = await self.store.sessions.load_messages(sid, first, job.through_seq) \
            if record is not None and first <= job.through_seq else []
        if not stored:
            outcome = _Outcome(None, None, 0, "skipped")
            if job.reason == "clear" and record is not None:
                await self._reset(job)
        else:
            # Counted for the chat and the bot, no one person (nobody asked for it), and never refused by a cap
            # (DESIGN §12). Set here: a worker task started inside a turn would otherwise carry that turn's scope.
            with usage_scope(sid, "", "summary", tally=[0]):  # a tally of its own, not a turn's
                outcome = await self._summarise_job(job, record, [m.message for m in stored])
        await self.store.jobs.finish(job.id)
        logger.info("summary job %d session %s %s seqs %d-%d: %d turn%s, %s, %.0f ms", job.id, sid, job.reason,
                    stored[0].seq if stored else first, job.through_seq, outcome.turns,
                    "" if outcome.turns == 1 else "s", outcome.status,
                    (time.perf_counter() - started) * 1000)
        return outcome

    async def _summarise_job(self, job: _Job, record: SessionRecord, messages: list[dict[str, Any]]) -> _Outcome:
        turns = count_turns(messages)
        earlier, earlier_turns = (None, 0) if job.reason == "clear" else self._current_summary(record)
        summary, fallback = await self._call_model(job, messages)
        texts = user_texts(messages)
        if summary and not fallback:  # the fallback quotes the users' lines verbatim
            summary, invented = drop_invented_quotes(summary, [*texts, earlier or ""])
            if invented:
                logger.info("summary job %d (session %s): %d line(s) quoting what no user said dropped",
                            job.id, job.session_id, invented)
            summary = summary if summary.strip() else None
        result = check_summary(summary or "", texts)
        self._note_check(job, result, fallback)
        # What is new: the checked summary, without lines the rolling summary already holds.
        text = new_lines(earlier, with_kept_lines(summary or "", result)).strip() or None
        if text is not None:
            await self.daily.append(job.session_id, job.reason, text)
        status = "fallback" if fallback else "summarised"
        if job.reason == "clear":
            await self._reset(job)
            return _Outcome(text, None, turns, status if text is not None else "none")
        if text is None:
            await self._advance(job)
            return _Outcome(None, None, turns, "none")
        injected = roll_summary(earlier, text, self._rolling_cap(), self._count(self._main_model()))
        done = await self._inject(job, injected, earlier_turns + turns)
        return _Outcome(text, injected if done else None, turns, status if done else f"{status}, memory only")

    def _note_check(self, job: _Job, result: CheckResult, fallback: bool) -> None:
        checked = Checked(job.id, job.reason, result.found, result.total, len(result.kept_lines), fallback)
        self.checks[job.session_id] = checked
        if result.total:
            logger.info("summary check, job %d (session %s): the %s kept %d of %d facts (%.0f%%); "
                        "%d line(s) kept verbatim", job.id, job.session_id, "fallback" if fallback else "summary",
                        result.found, result.total, checked.share * 100, checked.kept)

    # --- the model ---------------------------------------------------------------------------
    def _main_model(self) -> str:
        return self.config().model

    def _summary_model(self) -> str:
        cfg = self.config()
        return cfg.summary_model or cfg.model

    def _count(self, model: str) -> Callable[[str], int]:
        return self.counter(model).count_text

    def _rolling_cap(self) -> int:
        """The rolling summary's size in tokens: a tenth of the main model's window, at most 4,000."""
        return max(64, min(ROLLING_MAX_TOKENS, int(self.window(self._main_model()) * ROLLING_SHARE)))

    async def _call_model(self, job: _Job, messages: list[dict[str, Any]]) -> tuple[str | None, bool]:
        """The summary of ``messages`` (None for "none") and whether it is the rule-based fallback."""
        model = self._summary_model()
        window = self.window(model)
        count = self._count(model)

        async def call(text: str, merging: bool) -> str:
            return await self._call_part(job, part_request(text, merging), model, window, count)

        try:
            text = await summarise_entries(transcript_entries(messages), window=window, count=count, call=call)
            return (text or None), False
        except Exception as exc:  # noqa: BLE001 - any failure ends in the fallback
            logger.warning("summary job %d (session %s): the summary model failed (%s); writing the fallback",
                           job.id, job.session_id, exc)
        return (fallback_summary(messages) or None), True

    async def _call_part(self, job: _Job, request: list[dict[str, Any]], model: str, window: int,
                         count: Callable[[str], int]) -> str:
        """One summary request, tried as :attr:`retry` says; "" for "none".

        This layer owns the retries of summary requests: each try is journalled and is one model call
        (the client is asked for one try), so a part costs at most ``retry.attempts`` calls. An overflow is
        raised at once (the caller splits the text further rather than send it again), and so is an error
        that retrying cannot fix.
        """
        asked = sum(count(m["content"]) for m in request) + REQUEST_FRAMING_TOKENS
        cap = max(16, min(SUMMARY_ANSWER_TOKENS, window - int(asked * 1.2)))

        async def once() -> str:
            await self.store.jobs.count_attempt(job.id)
            response = await self.llm.complete(request, tools=None, model=model, temperature=0, max_tokens=cap,
                                               retry=ONE_TRY)
            text = (response.content or "").strip()
            if not text:
                raise ValueError("the model returned an empty summary")
            return "" if is_none(text) else text

        def log(state: RetryCallState) -> None:
            logger.warning("summary job %d (session %s): attempt %d/%s failed (%s); retry in %.1fs", job.id,
                           job.session_id, state.attempt_number, self.retry.attempts, state.outcome.exception(),
                           state.upcoming_sleep)

        return await self.retry.call(once, retry_on=_retryable, before_sleep=log)

    # --- injection ---------------------------------------------------------------------------
    def _state(self, session_id: str) -> LiveState | None:
        return self.sessions.peek(session_id)

    def _current_summary(self, record: SessionRecord) -> tuple[str | None, int]:
        """The summary the session has now: the live state's if loaded, else the stored one."""
        state = self._state(record.session_id)
        if state is not None:
            return state.summary, state.summary_turns if state.summary else 0
        return record.summary, record.summary_turns if record.summary else 0

    def _superseded(self, job: _Job) -> bool:
        return self._clears.get(job.session_id, 0) != job.epoch

    async def _inject(self, job: _Job, summary: str, turns: int) -> bool:
        """Make ``summary`` the session's injected summary (stored, then live); False if a clear came since."""
        if self._superseded(job):
            await self._advance(job)
            return False
        if not await self.sessions.inject(job.session_id, summary, turns, job.through_seq,
                                          lambda: self._superseded(job)):
            return False
        await notify_written(self.on_written, job.session_id, "injected", summary, None)
        return True

    async def _advance(self, job: _Job) -> None:
        """Record that the job's messages are summarised, leaving the summary as it is."""
        await self.sessions.mark_summarized(job.session_id, job.through_seq)

    async def _reset(self, job: _Job) -> None:
        """A clear job: keep the summary reset, even if a job queued before the clear injected one meanwhile."""
        await self.sessions.reset_summary(job.session_id, job.through_seq)
