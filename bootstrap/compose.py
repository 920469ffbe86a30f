"""The composition: every long-lived part made in dependency order, each given what it uses when it is made.

``app.py`` runs what this builds (start, stop); tests and tools that need the whole bot in one process can
build it the same way. Nothing here starts anything: the store is opened and the admins' grants loaded,
because the parts made after them read them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from agent.llm import OpenAILLM, UnconfiguredLLM
from agent.loop import Agent
from agent.sessions import LiveSessions, SessionManager
from agent.tokens import TokenCounters
from agent.tools.base import ToolRegistry
from agent.window import ModelWindows
from channels.base import BaseChannel
from channels.registry import check_channel_type
from config.settings import Config, ConfigHolder
from config.watch import ConfigWatcher
from dispatcher.admins import Admins
from dispatcher.commands import CommandRegistry, Services, keeps_no_secret
from dispatcher.dispatcher import Dispatcher
from dispatcher.leader import Leadership
from mcp_tools import install as install_mcp
from memory.daily import DailyMemory, MemoryWritten
from memory.person import PEOPLE_DIR, PersonNotes
from plugins.manager import install as install_plugins
from store.locks import locks_for
from store.shared_values import SharedValues
from store.store import Store
from summaries.summarizer import Summarizer
from usage.caps import UsageCaps
from usage.recorder import UsageRecorder

logger = logging.getLogger("app")


@dataclass(slots=True)
class Composition:
    """What :func:`compose` made: the services, and the parts the app starts and stops itself."""

    services: Services
    dispatcher: Dispatcher
    leadership: Leadership
    #: started after "ready"; it read the file's digest when made, so an edit made in between is still seen
    config_watcher: ConfigWatcher
    channels: list[BaseChannel]


def build_llm(cfg: Config, usage: UsageRecorder | None = None):
    """The model client, or a stand-in that explains how to configure one; ``usage`` records each call."""
    if not cfg.model_configured:
        return UnconfiguredLLM()
    return OpenAILLM(api_key=cfg.open_ai_api_key, base_url=cfg.open_ai_api_base, model=cfg.model,
                     azure_api_version=cfg.azure_api_version, max_output_tokens=cfg.agent_max_output_tokens,
                     max_parallel=cfg.model_max_parallel, usage=usage)


async def discover_window(services: Services, model: str) -> None:
    """Ask the model server for the window of ``model`` when nothing else knows it (agent/window.py), then log
    the window in force and where it came from."""
    windows = services.agent.windows
    llm = services.llm
    if isinstance(llm, OpenAILLM) and not llm.azure_api_version:
        try:
            await windows.discover(model, llm.server_json)
        except Exception:  # noqa: BLE001 - discovery is a courtesy; the table's window stays
            logger.warning("asking the model server for its context window failed", exc_info=True)
    logger.info("model %s: context window %s", model, windows.get(model).describe())


def build_channels(cfg: Config, services: Services | None = None,
                   failures: dict[str, str] | None = None) -> list[BaseChannel]:
    """The channels named by ``channel_type``, built through the channel registry. With ``failures``, a channel
    that cannot be built is logged and left out, with the reason put there; without, the error is raised."""
    from channels.registry import create_channel

    # what a channel may name in its factory: the whole services, or only the parts the built-in ones use
    available = dict(config=cfg, services=services, keep_line=keeps_no_secret)
    if services is not None:
        windows = services.agent.windows
        available.update(commands=services.commands, window=lambda model: windows.get(model).describe(),
                         shared_values=SharedValues(services.store))
    channels = []
    for name in cfg.channels:
        try:
            channels.append(create_channel(name, **available))
        except Exception as exc:
            if failures is None:
                raise
            logger.exception("channel %s cannot be built", name)
            failures[name] = f"cannot be built ({type(exc).__name__}: {exc})"
    return channels



async def compose(cfg: Config, config_path: Path, failures: dict[str, str]) -> Composition:
    """Create every part, in dependency order. A channel that cannot be built is left out, its reason put in
    ``failures``."""
    holder = ConfigHolder(cfg, config_path)
    store = Store(cfg.database_url())
    await store.open()
    # PostgreSQL coordinates several processes (DESIGN §10); on SQLite this process is alone.
    locks = locks_for(cfg.database_url())
    counters = TokenCounters()  # the agent's tokenizer; the summariser's requests are counted with it too
    usage = store.usage  # every model call's tokens (DESIGN §12)
    recorder = UsageRecorder(usage, counters)
    llm = build_llm(cfg, recorder)
    tools = ToolRegistry()  # the built-in tools are registered by the `tools` plugin
    written = MemoryWritten()  # what is written to memory reaches the plugins' memory_written (indexers)
    daily = DailyMemory(cfg.data_path() / "memory", cfg.zone(), on_written=written.notify)
    people = PersonNotes(daily.root / PEOPLE_DIR)  # person notes: kept out of the index, read by the prompt
    live = LiveSessions(store)  # the loaded contexts: the manager fills them, the summariser injects through them
    windows = ModelWindows(holder)  # the models' windows (configured, asked of the server, the table)
    summarizer = Summarizer(store=store, llm=llm, config=holder, sessions=live, daily=daily, locks=locks,
                            on_written=written.notify, counter=counters, window=windows)
    sessions = SessionManager(store, holder, summarizer, live=live)
    agent = Agent(llm=llm, tools=tools, store=store, config=holder, sink=summarizer,
                  notes=daily.long_term_notes, person_notes=people.for_prompt, counter=counters,
                  windows=windows)
    admins = Admins(store, holder, shared=locks.shared)
    await admins.load()
    mcp = install_mcp(holder, admins, tools)  # the MCP servers' tools reach each turn through the tool registry
    services = Services(config=holder, store=store, llm=llm, tools=tools, sessions=sessions, agent=agent,
                        commands=CommandRegistry(), admins=admins, locks=locks, memory=daily,
                        people=people, summarizer=summarizer, usage=usage, usage_recorder=recorder,
                        caps=UsageCaps(usage, holder), mcp=mcp)
    # plugins: commands, tools and message hooks; config.json edits apply live
    plugins = install_plugins(services)
    written.subscribe(plugins.memory_written)
    dispatcher = Dispatcher(config=holder, store=store, agent=agent, sessions=sessions, commands=services.commands,
                            services=services, locks=locks, admins=admins, hooks=plugins, caps=services.caps)
    leadership = Leadership(locks)
    config_watcher = ConfigWatcher(holder, config_path, check=check_channel_type)
    channels = build_channels(cfg, services, failures)
    for channel in channels:
        dispatcher.add_channel(channel)
    return Composition(services, dispatcher, leadership, config_watcher, channels)
