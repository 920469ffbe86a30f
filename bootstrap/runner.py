"""The running bot: every long-lived part, started in order after "ready" and stopped in the reverse order.

:class:`App` builds the parts (bootstrap/compose.py), starts the channels and crash resume, then what
receiving messages does not need (config watching, leadership and the cleanup, reminders, the console,
warm-ups), and on a stop waits for the turns, summaries and plugins' last work, each within its bound.
``app.py`` is the command line around it. Its log lines are the ``app`` logger's (``INFO app: ready: ...``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.llm import NO_MODEL_HINT
from bootstrap.compose import compose, discover_window
from bootstrap.lifecycle import Lifecycle
from bootstrap.preflight import SETUP_ERROR, Redactor, probe_model_endpoint, start_line
from channels.base import BaseChannel
from config.settings import Config
from config.watch import ConfigWatcher
from core import heap
from dispatcher.commands import Services
from dispatcher.dispatcher import Dispatcher
from dispatcher.leader import Leadership
from summaries.summarizer import Summarizer

if TYPE_CHECKING:
    from store.retention import CleanupJob

logger = logging.getLogger("app")

#: How long a graceful stop waits for in-flight turns; the rest resume at the next start.
TURN_GRACE_SECONDS = 10.0
#: How long a graceful stop waits for pending summaries; the rest run again at the next start.
SUMMARY_GRACE_SECONDS = 10.0
#: How long a graceful stop waits for plugins' last background work (the memory index's last passages).
PLUGIN_GRACE_SECONDS = 10.0
#: Several processes: seconds between two looks for summary jobs a dead process left pending.
ORPHAN_SCAN_SECONDS = 30.0


class App:
    """Owns every long-lived part and their order of start and stop."""

    def __init__(self, config_path: Path) -> None:
        self.config_path = config_path
        self.services: Services | None = None
        self.dispatcher: Dispatcher | None = None
        self.channels: list[BaseChannel] = []
        self.leadership: Leadership | None = None
        self.config_watcher: ConfigWatcher | None = None
        self.cleanup: CleanupJob | None = None
        #: every part that stops, in one declared order (:meth:`declare_stops`, then the channels as they start,
        #: then what starts after "ready"): the last registered stops first
        self.lifecycle = Lifecycle()
        self._stop = asyncio.Event()
        #: a second Ctrl-C (or SIGTERM) during the stop: stop waiting, what is unfinished resumes at the next start
        self._stop_now = asyncio.Event()
        self._stopping = False
        self._warm_ups: set[asyncio.Task] = set()
        self._warm_up_done: asyncio.Task | None = None
        #: channels only the leader receives on (several processes)
        self._leader_channels: list[BaseChannel] = []
        #: masks secrets in log lines; set by main() once logging is set up
        self.redact: Redactor | None = None
        #: the channels that cannot run, with the reason (failed to build or start, or later, e.g. WeChat's login)
        self.channel_failures: dict[str, str] = {}

    def request_stop(self) -> None:
        """Ask for a graceful stop (SIGINT/SIGTERM); asked again while stopping, stop waiting at once."""
        if self._stop.is_set() or self._stopping:
            if not self._stop_now.is_set():
                logger.warning("stopping now: what is unfinished resumes at the next start")
            self._stop_now.set()
        self._stop.set()

    async def _wait_or_stop_now(self, what: str, work: Awaitable[Any], cut: Callable[[], Awaitable[Any]] | None,
                                then: str) -> None:
        """Await ``work``; when ``what`` is not empty, say first what the stop waits for, and that a second Ctrl-C
        stops now (``then`` says what becomes of it). A second Ctrl-C runs ``cut`` (or cancels ``work``)."""
        task = asyncio.ensure_future(work)
        if what and not self._stop_now.is_set():
            logger.warning("stopping: waiting %s; press Ctrl-C again to stop now (%s)", what, then)
        now = asyncio.create_task(self._stop_now.wait())
        try:
            await asyncio.wait({task, now}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            now.cancel()
        if not task.done():
            if cut is None:
                task.cancel()
            else:
                await cut()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def build(self, cfg: Config) -> Services:
        """Create every part, in dependency order (bootstrap/compose.py), and keep what this class runs."""
        parts = await compose(cfg, self.config_path, self.channel_failures)
        self.dispatcher, self.leadership = parts.dispatcher, parts.leadership
        self.config_watcher, self.channels = parts.config_watcher, parts.channels
        return parts.services

    async def run(self, cfg: Config) -> int:
        """Run until every finite channel is done or a stop is requested."""
        logger.info("%s", start_line(cfg))
        services = self.services = await self.build(cfg)
        assert self.dispatcher is not None
        await self.declare_stops(services)
        if self.redact is not None:
            redact = self.redact
            services.config.on_change(lambda old, new: redact.update(new))
        if cfg.model_configured:
            await discover_window(services, cfg.model)
            services.config.on_change(self._rediscover_window)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        if not cfg.model_configured:
            print(NO_MODEL_HINT, flush=True)
        try:
            self.dispatcher.hold_intake()  # until resume_pending has queued the journal's unanswered ones
            await self._start_channels(services.locks.shared)
            if not self._no_channel_left():
                if services.summarizer is not None:
                    await services.summarizer.start()
                await self.dispatcher.resume_pending()
                logger.info("ready: %s", ", ".join(c.name for c in self.channels) or "no channels")
                await self.start_background(services)
                await self._wait()
        finally:
            await self.shutdown(services)
        if self._no_channel_left():
            return self._no_channel_error()
        return 0

    def _rediscover_window(self, old: Config, new: Config) -> None:
        """After a config change of the model or its window: ask the server again (in the background)."""
        if self.services is None or (old.model, old.model_context_window) == (new.model, new.model_context_window):
            return
        task = asyncio.create_task(discover_window(self.services, new.model), name="window discovery")
        self._warm_ups.add(task)
        task.add_done_callback(self._warm_ups.discard)

    async def _start_channels(self, shared: bool) -> None:
        """Start every channel; one that fails is marked failed and the others still start."""
        for channel in self.channels:
            # a channel that failed to start is stopped too (what it opened before failing)
            await self.lifecycle.start(f"channel {channel.name}", None, channel.stop)
        # the replies in progress are waited for before any channel stops (they are sent through them)
        await self.lifecycle.start("replies in progress", None, self._drain_turns)
        for channel in self.channels:
            try:
                if shared and channel.single_receiver:  # the leader receives (start_background)
                    await channel.start(intake=False)
                    self._leader_channels.append(channel)
                else:
                    await channel.start()
            except Exception as exc:  # noqa: BLE001 - one broken channel must not stop the others
                logger.exception("channel %s failed to start", channel.name)
                channel.fail(str(exc) or type(exc).__name__)

    def _no_channel_left(self) -> bool:
        """True when channels were configured and none of them can run (any more)."""
        for channel in self.channels:
            if channel.failure is not None:
                self.channel_failures.setdefault(channel.name, channel.failure)
        return bool(self.channel_failures) and all(c.failure is not None for c in self.channels)

    def _no_channel_error(self) -> int:
        """Say in one line on stderr why no channel can run; the exit status of a setup mistake."""
        reasons = "; ".join(f"{name}: {why}" for name, why in self.channel_failures.items())
        if self.redact is not None:
            reasons = self.redact(reasons)
        print(f"setup error: no channel can run: {reasons}", file=sys.stderr, flush=True)
        return SETUP_ERROR

    async def _check_model_endpoint(self, cfg: Config) -> None:
        """Say in one line, at start, when a custom model endpoint refuses connections (a local server that is
        not running), instead of letting the first chat message find out."""
        hint = await probe_model_endpoint(cfg)
        if hint:
            logger.warning("%s", hint)

    async def start_background(self, services: Services) -> None:
        """Start what receiving messages does not need, right after "ready": config watching, the leader's
        duties (cleanup, a single receiver's intake), orphaned summaries, the endpoint probe, warm-ups.

        Each part is started through :attr:`background`, so :meth:`shutdown` stops exactly these, last first. A
        first turn that needs the tokenizer before its background load is done waits for it (the tokenizer's
        lock), so deferring it cannot make the turn fail.
        """
        from store.retention import CleanupJob  # imports APScheduler, which nothing before "ready" needs

        assert self.leadership is not None and self.config_watcher is not None
        watcher, leadership = self.config_watcher, self.leadership
        await self.lifecycle.start("config watcher", watcher.start, watcher.stop)
        if services.mcp is not None:  # the servers start together, each within its timeout, without holding the rest
            mcp = services.mcp
            starting = asyncio.create_task(mcp.start(), name="mcp servers")
            await self.lifecycle.start("mcp servers", None, mcp.stop)
            await self.lifecycle.start("mcp servers starting", None, starting.cancel)
        from media.files import sweep_media

        data_dir = services.config().data_path()
        cleanup = self.cleanup = CleanupJob(services.store, services.config, usage=services.usage,
                                            sweep_media=lambda: sweep_media(services.store, data_dir))
        # The cleanup runs once across processes: on the leader (on SQLite, this process from the start).
        leadership.on_elected.append(_as_async(cleanup.start))
        leadership.on_deposed.append(_as_async(cleanup.stop))
        for channel in self._leader_channels:  # e.g. Telegram polling: one process polls
            leadership.on_elected.append(channel.start_intake)
            leadership.on_deposed.append(channel.stop_intake)
        await self.lifecycle.start("leadership", leadership.start, leadership.stop)  # its stop stops the cleanup
        await self.lifecycle.start("cleanup", None, cleanup.stop)
        services.config.on_change(lambda old, new: cleanup.reschedule())
        await self.start_reminders(services)
        if services.locks.shared and services.summarizer is not None:
            adopt = asyncio.create_task(adopt_summary_orphans(services.summarizer), name="summary orphans")
            await self.lifecycle.start("summary orphans", None, adopt.cancel)
        if services.summarizer is not None and not services.locks.shared:  # DESIGN §4: restore summaries ahead
            from agent.restore_ahead import restore_ahead

            ahead = asyncio.create_task(restore_ahead(services.store, services.sessions, services.config.current),
                                        name="restore ahead")
            await self.lifecycle.start("restore ahead", None, ahead.cancel)
        probe = asyncio.create_task(self._check_model_endpoint(services.config.current), name="model endpoint probe")
        await self.lifecycle.start("model endpoint probe", None, probe.cancel)
        from console.site import start_console  # aiohttp and Jinja2: imported after "ready"

        # started last, so stopped first: no operator action starts while the rest stops
        console = await start_console(services, self.channel_failures, channels=self.channels,
                                      leadership=self.leadership)
        if console is not None:
            services.console = console  # /console makes its new one-time links
            await self.lifecycle.start("web console", None, console.stop)
        heap.freeze()
        self._warm_up("tokenizer", services.agent.counter, services.config.current.model)
        warm_ups = list(self._warm_ups)

        async def freeze_when_warm() -> None:
            await asyncio.gather(*warm_ups, return_exceptions=True)
            heap.freeze()

        self._warm_up_done = asyncio.create_task(freeze_when_warm(), name="freeze heap")

    async def start_reminders(self, services: Services) -> None:
        """Fire due reminders (reminders/firing.py): in every process, each claimed once through the database;
        started after crash resume, so a reminder journalled before a crash is not overtaken."""
        from reminders.firing import ReminderFiring

        dispatcher = self.dispatcher
        assert dispatcher is not None
        running = [c.name for c in self.channels if c.failure is None]
        firing = ReminderFiring(dispatcher.reminders, services.config, lambda: running, dispatcher.answer_journalled)
        await self.lifecycle.start("reminders", _as_async(firing.start), _as_async(firing.stop))

    def _warm_up(self, what: str, func: Any, *args: Any) -> None:
        """Run ``func(*args)`` in a worker thread, off the event loop; a failure is logged, not raised."""

        def done(task: asyncio.Task) -> None:
            if not task.cancelled() and task.exception() is not None:
                logger.warning("loading the %s in the background failed", what, exc_info=task.exception())

        task = asyncio.create_task(asyncio.to_thread(func, *args), name=f"warm-up {what}")
        task.add_done_callback(done)
        self._warm_ups.add(task)
        task.add_done_callback(self._warm_ups.discard)

    async def _wait(self) -> None:
        stop = asyncio.create_task(self._stop.wait())
        waits = [stop]
        if self.channels and all(c.finite for c in self.channels):
            waits.append(asyncio.create_task(self._finite_done()))
        if self.channels:
            # every channel failed for good (WeChat's login, say): nothing can arrive any more
            waits.append(asyncio.create_task(self._all_failed()))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)

    async def _all_failed(self) -> None:
        for channel in self.channels:
            await channel.failed.wait()

    async def _finite_done(self) -> None:
        assert self.dispatcher is not None
        await asyncio.gather(*(c.wait_closed() for c in self.channels))
        await self.dispatcher.wait_idle()

    async def declare_stops(self, services: Services) -> None:
        """Register the stops of what :meth:`build` made, in start order, so that :meth:`shutdown` runs them last
        first: the channels (registered as they start) and what starts after "ready" stop before these; then the
        intake journal's last writes, the summaries, the plugins' last work, the model client, the cleanup's last
        batch, the locks and the database."""
        dispatcher = self.dispatcher
        assert dispatcher is not None
        lifecycle = self.lifecycle
        await lifecycle.start("database", None, services.store.close)
        await lifecycle.start("locks", None, services.locks.close)
        await lifecycle.start("cleanup's last batch", None, self._cleanup_stopped)
        await lifecycle.start("model client", None, self._close_llm)
        await lifecycle.start("plugins' last work", None, self._plugins_last_work)
        await lifecycle.start("summaries", None, self._drain_summaries)
        await lifecycle.start("intake journal", None, dispatcher.flush_intake)

    async def shutdown(self, services: Services) -> None:
        """Stop every part through :attr:`lifecycle`, in the reverse of the declared order: the background parts
        (last started first), the replies in progress, the channels, the intake journal, the summaries, the
        plugins' last work, the model client, the locks, the database.

        Each wait that may take seconds (turns, summaries, the plugins' last work) is said on the console with
        its bound, and a second Ctrl-C ends it at once: the turns and summaries cut short are journalled and
        resume at the next start.
        """
        logger.info("stopping")
        self._stopping = True
        await self.lifecycle.stop()
        logger.info("stopped")

    async def _drain_turns(self) -> None:
        """Wait (within TURN_GRACE_SECONDS) for the replies in progress; the rest resume at the next start."""
        dispatcher = self.dispatcher
        assert dispatcher is not None
        await self._wait_or_stop_now(
            f"up to {TURN_GRACE_SECONDS:.0f} s for the replies in progress" if dispatcher.busy else "",
            dispatcher.drain(TURN_GRACE_SECONDS), dispatcher.cut_turns, "they are answered after the next start")

    async def _drain_summaries(self) -> None:
        """Wait (within SUMMARY_GRACE_SECONDS) for the pending summaries; the rest resume at the next start."""
        summarizer = self.services.summarizer if self.services is not None else None
        if summarizer is None:
            return
        pending = summarizer.pending()
        await self._wait_or_stop_now(
            f"up to {SUMMARY_GRACE_SECONDS:.0f} s for {pending} summar{'y' if pending == 1 else 'ies'} to finish"
            if pending else "", summarizer.drain(SUMMARY_GRACE_SECONDS), lambda: summarizer.drain(0),
            "they resume at the next start")

    async def _plugins_last_work(self) -> None:
        """The plugins' last background work (the memory index stores what the last summaries wrote)."""
        plugins = self.services.plugins if self.services is not None else None
        if plugins is None:
            return
        try:
            await self._wait_or_stop_now("", _within(PLUGIN_GRACE_SECONDS, plugins.stopping()), None, "")
        except TimeoutError:
            logger.warning("the plugins' last work did not finish within %.0f s (the memory index: an admin's "
                           "/memory rebuild indexes what is missing)", PLUGIN_GRACE_SECONDS)

    async def _close_llm(self) -> None:
        if self.services is not None:
            with contextlib.suppress(Exception):
                await self.services.llm.close()

    async def _cleanup_stopped(self) -> None:
        if self.cleanup is not None:
            await self.cleanup.wait_stopped(2.0)


async def _within(seconds: float, work: Awaitable[Any]) -> Any:
    """``work``'s result, or TimeoutError after ``seconds`` (``asyncio.wait_for`` in Python 3.11 can swallow a
    cancellation, here a second Ctrl-C, that meets the end of the work)."""
    async with asyncio.timeout(seconds):
        return await work


def _as_async(func: Callable[[], object]) -> Callable[[], Awaitable[None]]:
    """``func`` as a coroutine function (leadership's duties are awaited)."""

    async def call() -> None:
        func()

    return call


async def adopt_summary_orphans(summarizer: Summarizer) -> None:
    """Several processes: now and then, run the summary jobs a dead process left pending."""
    while True:
        await asyncio.sleep(ORPHAN_SCAN_SECONDS)
        try:
            await summarizer.adopt_orphans()
        except Exception as exc:  # noqa: BLE001 - the database is away: the next scan tries again
            logger.warning("looking for orphaned summary jobs failed (%s)", type(exc).__name__)
