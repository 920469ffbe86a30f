"""A whole bot in-process for plugin tests: real config file, store, dispatcher and plugin manager."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.llm import OpenAILLM
from agent.loop import Agent
from agent.sessions import LoggingDropSink, SessionManager
from agent.tokens import TokenCounters
from agent.tools.base import ToolRegistry
from config.settings import ConfigHolder, load_config
from dispatcher.admins import Admins
from dispatcher.commands import CommandRegistry, Services
from dispatcher.dispatcher import Dispatcher
from memory.daily import DailyMemory, MemoryWritten
from memory.person import PEOPLE_DIR, PersonNotes
from plugins.manager import PluginManager, install
from store.locks import LocalLocks
from store.store import Store
from store.usage import UsageStore
from tests.fakes.channel import RecordingChannel
from tests.fakes.fake_llm import FakeLLM
from usage.caps import UsageCaps
from usage.recorder import UsageRecorder


class FakeSummarizer(LoggingDropSink):
    """Records jobs; ``summarize_now`` persists a fixed summary like the real one injects it."""

    def __init__(self, text: str | None = "- Alice chose the blue plan.") -> None:
        self.text = text
        self.store: Store | None = None
        self.submitted: list[tuple[str, str, int, int]] = []
        self.now: list[tuple[str, str, int, int]] = []
        #: the last summary check per session, as the real summariser keeps it for /context
        self.checks: dict = {}

    async def submit(self, session_id: str, reason: str, from_seq: int, through_seq: int) -> None:
        """Record a background job."""
        self.submitted.append((session_id, reason, from_seq, through_seq))

    async def summarize_now(self, session_id: str, reason: str, from_seq: int, through_seq: int) -> str | None:
        """Record the call and persist the summary as injected."""
        self.now.append((session_id, reason, from_seq, through_seq))
        if self.text is None:
            return None
        assert self.store is not None
        stored = await self.store.sessions.load_messages(session_id, from_seq, through_seq)
        turns = sum(1 for m in stored if m.message.get("role") == "user")
        await self.store.sessions.set_summary(session_id, self.text, turns, through_seq)
        return self.text


class PluginBot:
    """The bot's parts over ``tmp_path`` (config.json, chatbot.db), with a telegram and a terminal channel."""

    def __init__(self, tmp_path: Path, *, llm: FakeLLM | None = None, summarizer: FakeSummarizer | None = None,
                 extra: list[Any] | None = None, directory: Path | None = None, **settings: Any) -> None:
        self.tmp_path = tmp_path
        self.path = tmp_path / "config.json"
        if not self.path.exists() or settings:
            self.path.write_text(json.dumps({"data_dir": "data", **settings}, indent=2), encoding="utf-8")
        self.llm = llm or FakeLLM()
        self.summarizer = summarizer
        self.extra = extra or []
        self.directory = directory
        self.channel = RecordingChannel("telegram")
        self.terminal = RecordingChannel("terminal")

    async def __aenter__(self) -> PluginBot:
        cfg = load_config(self.path, environ={})
        self.holder = ConfigHolder(cfg, self.path)
        self.store = Store(cfg.database_url())
        await self.store.open()
        sink = self.summarizer if self.summarizer is not None else LoggingDropSink()
        if self.summarizer is not None:
            self.summarizer.store = self.store
        self.sessions = SessionManager(self.store, self.holder, sink)
        self.tools = ToolRegistry()
        written = MemoryWritten()
        memory = DailyMemory(cfg.data_path() / "memory", cfg.zone(), on_written=written.notify)
        self.people = PersonNotes(memory.root / PEOPLE_DIR)
        self.agent = Agent(llm=self.llm, tools=self.tools, store=self.store, config=self.holder, sink=sink,
                           notes=memory.long_term_notes, person_notes=self.people.for_prompt)
        self.commands = CommandRegistry()
        locks = LocalLocks()
        admins = Admins(self.store, self.holder)
        await admins.load()
        self.usage = UsageStore(self.store)
        self.recorder = UsageRecorder(self.usage, TokenCounters())
        if isinstance(self.llm, OpenAILLM):  # the real client on a fake server records its calls, as in app.py
            self.llm.usage = self.recorder
        self.services = Services(config=self.holder, store=self.store, llm=self.llm, tools=self.tools,
                                 sessions=self.sessions, agent=self.agent, commands=self.commands, admins=admins,
                                 locks=locks, summarizer=self.summarizer,  # type: ignore[arg-type]
                                 memory=memory, people=self.people, usage=self.usage, usage_recorder=self.recorder,
                                 caps=UsageCaps(self.usage, self.holder))
        self.manager: PluginManager = install(self.services, directory=self.directory, extra=self.extra)
        written.subscribe(self.manager.memory_written)
        self.dispatcher = Dispatcher(config=self.holder, store=self.store, agent=self.agent, sessions=self.sessions,
                                     commands=self.commands, services=self.services, locks=locks, admins=admins,
                                     hooks=self.manager, caps=self.services.caps)
        self.dispatcher.add_channel(self.channel)
        self.dispatcher.add_channel(self.terminal)
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Stop as app.py does: the turns, the summaries, the plugins' last work (the memory and history indexers),
        then the database. A task left running on a closed loop would drop its pooled connection unclosed."""
        await self.dispatcher.drain(5)
        drain = getattr(self.summarizer, "drain", None)
        if drain is not None:
            await drain(5)
        await self.manager.stopping()
        await self.store.close()

    async def say(self, text: str, *, terminal: bool = False, **kw: Any) -> str:
        """Send one message and return the reply it got."""
        channel = self.terminal if terminal else self.channel
        before = len(channel.sent)
        await self.dispatcher.handle(channel.message(text, **kw))
        await self.dispatcher.wait_idle()
        replies = channel.texts()[before:]
        assert len(replies) == 1, replies
        return replies[0]

    async def admin(self, text: str) -> str:
        """Send from the terminal, whose user is always an admin."""
        return await self.say(text, terminal=True)

    def file_bytes(self) -> bytes:
        """config.json as it is on disk."""
        return self.path.read_bytes()
