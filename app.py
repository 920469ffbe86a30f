"""The composition root: load config, build store, model, tools, commands, dispatcher, channels; run; stop.

Usage: ``python app.py [--config PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.llm import NO_MODEL_HINT, OpenAILLM, UnconfiguredLLM
from agent.loop import Agent
from agent.session import SessionManager
from agent.tokens import check_context_window
from agent.tools.base import ToolRegistry
from agent.window import ModelWindows
from bootstrap.preflight import (
    SETUP_ERROR,
    Redactor,
    SetupError,
    channel_problems,
    check_channels,
    check_data_dir,
    lock_database,
    probe_model_endpoint,
    setup_logging,
    start_line,
)
from channels.base import BaseChannel
from channels.terminal import start_banner, stdin_is_terminal
from config.settings import Config, ConfigHolder, load_config
from config.watch import ConfigWatcher
from core.errors import ConfigError
from dispatcher.commands import CommandRegistry
from dispatcher.dispatcher import Dispatcher
from dispatcher.leader import Leadership
from memory.daily import DailyMemory
from plugins.manager import install as install_plugins
from store.conversations import ConversationStore
from store.locks import locks_for
from summaries.summarizer import Summarizer

logger = logging.getLogger("app")

#: How long a graceful stop waits for in-flight turns; the rest resume at the next start.
TURN_GRACE_SECONDS = 10.0
#: How long a graceful stop waits for pending summaries; the rest run again at the next start.
SUMMARY_GRACE_SECONDS = 10.0
#: Several processes: seconds between two looks for summary jobs a dead process left pending.
ORPHAN_SCAN_SECONDS = 30.0


@dataclass
class Services:
    """Everything built at start, for built-in commands and plugins."""

    config: ConfigHolder
    store: ConversationStore
    llm: Any
    tools: ToolRegistry
    sessions: SessionManager
    agent: Agent
    dispatcher: Dispatcher
    commands: CommandRegistry
    summarizer: Any = None
    plugins: Any = None
    #: the daily memory files and notes (memory.daily.DailyMemory)
    memory: Any = None
    #: the semantic memory index (memory.search.MemorySearch), set by the memory_index plugin
    memory_search: Any = None
    channels: list[BaseChannel] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)


def build_llm(cfg: Config):
    """The model client, or a stand-in that explains how to configure one."""
    if not cfg.model_configured:
        return UnconfiguredLLM()
    return OpenAILLM(api_key=cfg.open_ai_api_key, base_url=cfg.open_ai_api_base, model=cfg.model,
                     azure_api_version=cfg.azure_api_version, max_output_tokens=cfg.agent_max_output_tokens,
                     max_parallel=cfg.model_max_parallel)


async def discover_window(services: Services, model: str) -> None:
    """Ask the model server for the window of ``model`` when nothing else knows it (agent/window.py), then log
    the window in force and where it came from."""
    windows = services.agent.windows
    ask = getattr(services.llm, "server_json", None)
    if ask is not None and not getattr(services.llm, "azure_api_version", ""):
        try:
            await windows.discover(model, ask)
        except Exception:  # noqa: BLE001 - discovery is a courtesy; the table's window stays
            logger.warning("asking the model server for its context window failed", exc_info=True)
    logger.info("model %s: context window %s", model, windows.get(model).describe())


def build_channels(cfg: Config, services: Any = None, failures: dict[str, str] | None = None) -> list[BaseChannel]:
    """The channels named by ``channel_type``, built through the channel registry. With ``failures``, a channel
    that cannot be built is logged and left out, with the reason put there; without, the error is raised."""
    from channels.registry import create_channel

    channels = []
    for name in cfg.channels:
        try:
            channels.append(create_channel(name, config=cfg, services=services))
        except Exception as exc:
            if failures is None:
                raise
            logger.exception("channel %s cannot be built", name)
            failures[name] = f"cannot be built ({type(exc).__name__}: {exc})"
    return channels


class App:
    """Owns every long-lived part and their order of start and stop."""

    def __init__(self, config_path: Path) -> None:
        self.config_path = config_path
        self.services: Services | None = None
        self._stop = asyncio.Event()
        self._warm_ups: set[asyncio.Task] = set()
        self._warm_up_done: asyncio.Task | None = None
        self._probe: asyncio.Task | None = None
        self._adopt: asyncio.Task | None = None
        #: channels only the leader receives on (several processes)
        self._leader_channels: list[BaseChannel] = []
        #: masks secrets in log lines; set by main() once logging is set up
        self.redact: Redactor | None = None
        #: the channels that cannot run, with the reason (failed to build or start, or later, e.g. WeChat's login)
        self.channel_failures: dict[str, str] = {}

    def request_stop(self) -> None:
        """Ask for a graceful stop (SIGINT/SIGTERM)."""
        self._stop.set()

    async def build(self, cfg: Config) -> Services:
        """Create every part, in dependency order."""
        holder = ConfigHolder(cfg, self.config_path)
        store = ConversationStore(cfg.database_url())
        await store.open()
        # PostgreSQL coordinates several processes (DESIGN §10); on SQLite this process is alone.
        locks = locks_for(cfg.database_url())
        llm = build_llm(cfg)
        tools = ToolRegistry()  # the built-in tools are registered by the `tools` plugin
        daily = DailyMemory(cfg.data_path() / "memory", cfg.zone())
        summarizer = Summarizer(store=store, llm=llm, config=holder, sessions=None, daily=daily)
        summarizer.locks = locks
        sessions = SessionManager(store, holder, summarizer)
        summarizer.sessions = sessions
        agent = Agent(llm=llm, tools=tools, store=store, config=holder, sink=summarizer,
                      notes=daily.long_term_notes, windows=ModelWindows(holder))
        # The summariser's requests fit the summary model's window, counted with the agent's tokenizer.
        summarizer.counter = agent.counter
        summarizer.window = agent.windows
        commands = CommandRegistry()
        dispatcher = Dispatcher(config=holder, store=store, agent=agent, sessions=sessions, commands=commands,
                                locks=locks)
        services = Services(config=holder, store=store, llm=llm, tools=tools, sessions=sessions, agent=agent,
                            dispatcher=dispatcher, commands=commands, summarizer=summarizer, memory=daily)
        dispatcher.services = services
        services.extras["locks"] = locks
        services.extras["leadership"] = Leadership(locks)
        await dispatcher.load_admins()
        # plugins: commands, tools and message hooks; config.json edits apply live
        install_plugins(services)
        # Started after "ready"; it reads the file's digest now, so an edit made in between is still seen.
        services.extras["config_watcher"] = ConfigWatcher(holder, self.config_path)
        services.channels = build_channels(cfg, services, self.channel_failures)
        for channel in services.channels:
            dispatcher.add_channel(channel)
        return services

    async def run(self, cfg: Config) -> int:
        """Run until every finite channel is done or a stop is requested."""
        logger.info("%s", start_line(cfg))
        services = self.services = await self.build(cfg)
        if self.redact is not None:
            redact = self.redact
            services.config.on_change(lambda old, new: redact.update(new))
        if cfg.model_configured:
            await discover_window(services, cfg.model)
            services.config.on_change(self._rediscover_window)
        for channel in services.channels:
            if channel.name == "terminal":
                channel.banner = start_banner(cfg, window=services.agent.windows.get(cfg.model).describe())
                channel.history_path = cfg.data_path() / "terminal_history"
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        if not cfg.model_configured:
            print(NO_MODEL_HINT, flush=True)
        try:
            services.dispatcher.hold_intake()  # until resume_pending has queued the journal's unanswered ones
            shared = services.extras["locks"].shared
            for channel in services.channels:
                try:
                    if shared and channel.single_receiver:  # the leader receives (start_background)
                        await channel.start(intake=False)  # type: ignore[call-arg]
                        self._leader_channels.append(channel)
                    else:
                        await channel.start()
                except Exception as exc:  # noqa: BLE001 - one broken channel must not stop the others
                    logger.exception("channel %s failed to start", channel.name)
                    channel.fail(str(exc) or type(exc).__name__)
            if not self._no_channel_left(services):
                await services.summarizer.start()
                await services.dispatcher.resume_pending()
                logger.info("ready: %s", ", ".join(c.name for c in services.channels) or "no channels")
                await self.start_background(services)
                self._probe = asyncio.create_task(self._check_model_endpoint(cfg), name="model endpoint probe")
                await self._wait(services)
        finally:
            await self.shutdown(services)
        if self._no_channel_left(services):
            return self._no_channel_error()
        return 0

    def _rediscover_window(self, old: Config, new: Config) -> None:
        """After a config change of the model or its window: ask the server again (in the background)."""
        if self.services is None or (old.model, old.model_context_window) == (new.model, new.model_context_window):
            return
        task = asyncio.create_task(discover_window(self.services, new.model), name="window discovery")
        self._warm_ups.add(task)
        task.add_done_callback(self._warm_ups.discard)

    def _no_channel_left(self, services: Services) -> bool:
        """True when channels were configured and none of them can run (any more)."""
        for channel in services.channels:
            if channel.failure is not None:
                self.channel_failures.setdefault(channel.name, channel.failure)
        return bool(self.channel_failures) and all(c.failure is not None for c in services.channels)

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
        """Start what receiving messages does not need, right after "ready": config watching, cleanup, warm-ups.

        A first turn that needs the tokenizer before its background load is done waits for it (the tokenizer's
        lock), so deferring it cannot make the turn fail.
        """
        from store.retention import CleanupJob  # imports APScheduler, which nothing before "ready" needs

        await services.extras["config_watcher"].start()
        cleanup = services.extras["cleanup"] = CleanupJob(services.store, services.config)
        # The cleanup runs once across processes: on the leader (on SQLite, this process from the start).
        leadership: Leadership = services.extras["leadership"]

        async def lead_cleanup() -> None:
            cleanup.start()

        async def stop_cleanup() -> None:
            cleanup.stop()

        leadership.on_elected.append(lead_cleanup)
        leadership.on_deposed.append(stop_cleanup)
        for channel in self._leader_channels:  # e.g. Telegram polling: one process polls
            leadership.on_elected.append(channel.start_intake)  # type: ignore[attr-defined]
            leadership.on_deposed.append(channel.stop_intake)  # type: ignore[attr-defined]
        await leadership.start()
        services.config.on_change(lambda old, new: cleanup.reschedule())
        if services.extras["locks"].shared:
            self._adopt = asyncio.create_task(adopt_summary_orphans(services.summarizer), name="summary orphans")
        cfg = services.config.current
        freeze_heap()
        self._warm_up("tokenizer", services.agent.counter, cfg.model)
        warm_ups = list(self._warm_ups)

        async def freeze_when_warm() -> None:
            await asyncio.gather(*warm_ups, return_exceptions=True)
            freeze_heap()

        self._warm_up_done = asyncio.create_task(freeze_when_warm(), name="freeze heap")

    def _warm_up(self, what: str, func: Any, *args: Any) -> None:
        """Run ``func(*args)`` in a worker thread, off the event loop; a failure is logged, not raised."""

        def done(task: asyncio.Task) -> None:
            if not task.cancelled() and task.exception() is not None:
                logger.warning("loading the %s in the background failed", what, exc_info=task.exception())

        task = asyncio.create_task(asyncio.to_thread(func, *args), name=f"warm-up {what}")
        task.add_done_callback(done)
        self._warm_ups.add(task)
        task.add_done_callback(self._warm_ups.discard)

    async def _wait(self, services: Services) -> None:
        stop = asyncio.create_task(self._stop.wait())
        waits = [stop]
        if services.channels and all(c.finite for c in services.channels):
            waits.append(asyncio.create_task(self._finite_done(services)))
        if services.channels:
            # every channel failed for good (WeChat's login, say): nothing can arrive any more
            waits.append(asyncio.create_task(self._all_failed(services)))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)

    @staticmethod
    async def _all_failed(services: Services) -> None:
        for channel in services.channels:
            await channel.failed.wait()

    async def _finite_done(self, services: Services) -> None:
        await asyncio.gather(*(c.wait_closed() for c in services.channels))
        await services.dispatcher.wait_idle()

    async def shutdown(self, services: Services) -> None:
        """Stop in order: intake, in-flight turns, background jobs, channels, database."""
        logger.info("stopping")
        if self._probe is not None:
            self._probe.cancel()
        if self._adopt is not None:
            self._adopt.cancel()
        leadership = services.extras.get("leadership")
        if leadership is not None:
            await leadership.stop()  # stops the cleanup when this process led
        cleanup = services.extras.get("cleanup")
        if cleanup is not None:
            cleanup.stop()
        await services.dispatcher.drain(TURN_GRACE_SECONDS)
        watcher = services.extras.get("config_watcher")
        if watcher is not None:
            await watcher.stop()
        for channel in reversed(services.channels):
            try:
                await channel.stop()
            except Exception:  # noqa: BLE001
                logger.exception("channel %s failed to stop", channel.name)
        await services.dispatcher.flush_intake()
        await services.summarizer.drain(SUMMARY_GRACE_SECONDS)
        close = getattr(services.llm, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()
        if cleanup is not None:
            await cleanup.wait_stopped(2.0)
        locks = services.extras.get("locks")
        if locks is not None:
            await locks.close()
        await services.store.close()
        logger.info("stopped")


async def adopt_summary_orphans(summarizer: Summarizer) -> None:
    """Several processes: now and then, run the summary jobs a dead process left pending."""
    while True:
        await asyncio.sleep(ORPHAN_SCAN_SECONDS)
        try:
            await summarizer.adopt_orphans()
        except Exception as exc:  # noqa: BLE001 - the database is away: the next scan tries again
            logger.warning("looking for orphaned summary jobs failed (%s)", type(exc).__name__)


def freeze_heap() -> None:
    """Put every object allocated so far (modules, classes, the tokenizer) in the collector's permanent
    generation.

    A full collection traverses every tracked object, and while it runs every chat waits; what start-up
    built lives as long as the process anyway, so it need not be traversed again (bench/cleanup.py
    measures the pauses; the figures are in README's benchmark section). The collector's thresholds stay
    CPython's defaults: at Telegram's rate of about 30 messages a second, collections are a negligible
    part of the CPU (bench/telegram_intake.py).
    """
    gc.freeze()


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="An LLM chatbot that never loses what people said.")
    parser.add_argument("--config", default=None, help="path to config.json (default: ./config.json)")
    args = parser.parse_args(argv)
    # Everything the bot writes (database, memory files, log, config.json) is for its owner's eyes only.
    os.umask(0o077)
    path = Path(args.config or "config.json").expanduser().resolve()
    if args.config is not None and not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        print(f"config error: {path} {what}", file=sys.stderr)
        return SETUP_ERROR
    notes: list[str] = []
    try:
        cfg = load_config(path, notes=notes)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return SETUP_ERROR
    try:
        check_data_dir(cfg)
        lock_database(cfg)
        check_channels(cfg)
        window_note = check_context_window(cfg.model, cfg.model_context_window) if cfg.model_configured else None
    except SetupError as exc:
        print(f"setup error: {exc}", file=sys.stderr)
        return SETUP_ERROR
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return SETUP_ERROR
    interactive = "terminal" in cfg.channels and stdin_is_terminal()
    redact = setup_logging(cfg, quiet_console=interactive)
    for note in [*notes, *([window_note] if window_note else [])]:
        logger.warning("config: %s", note)
    for name, why in channel_problems(cfg).items():
        logger.warning("channel %s cannot run: %s", name, why)
    app = App(path)
    app.redact = redact
    return run_loop(app.run(cfg))


def run_loop(main_coro: Any) -> int:
    """Run on uvloop where it is installed (it is on Linux and macOS), else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main_coro)
    return uvloop.run(main_coro)


if __name__ == "__main__":
    sys.exit(main())
