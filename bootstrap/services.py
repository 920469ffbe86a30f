"""The parts built at start that commands, tools and plugins may use, each with its type.

Built at start by bootstrap/compose.py in dependency order and handed to the dispatcher, the plugin manager
and the channels at construction. The dispatcher itself is not among them: commands act on sessions, the
store and the admins, not on the message path. Two parts are optional: the plugin manager (set by
:func:`plugins.manager.install`, which needs the services to load the plugins) and the memory search (made
by the ``memory_index`` plugin, which may be disabled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the parts' modules import each other's packages; the types are only for checkers
    from agent.loop import Agent
    from agent.session import SessionManager
    from agent.tools.base import ToolRegistry
    from config.settings import ConfigHolder
    from core.llm import BaseLLM
    from dispatcher.admins import Admins
    from dispatcher.commands import CommandRegistry
    from mcp_tools.manager import McpManager
    from memory.daily import DailyMemory
    from memory.history_index import HistoryIndex
    from memory.person import PersonNotes
    from memory.search import MemorySearch
    from plugins.manager import PluginManager
    from store.conversations import ConversationStore
    from store.locks import Locks
    from store.usage import UsageStore
    from summaries.summarizer import Summarizer
    from usage.caps import UsageCaps
    from usage.recorder import UsageRecorder


@dataclass(eq=False)
class Services:
    """Everything built at start, for built-in commands, tools and plugins."""

    config: ConfigHolder
    store: ConversationStore
    llm: BaseLLM
    tools: ToolRegistry
    sessions: SessionManager
    agent: Agent
    commands: CommandRegistry
    admins: Admins
    locks: Locks
    #: the daily memory files and notes
    memory: DailyMemory
    #: the person notes (PERSON.md), which the system prompt reads too
    people: PersonNotes
    #: the summariser; None in tests that run without one
    summarizer: Summarizer | None = None
    #: the plugin manager, once :func:`plugins.manager.install` has loaded the plugins
    plugins: PluginManager | None = None
    #: the semantic memory index, made by the ``memory_index`` plugin (None while it is off)
    memory_search: MemorySearch | None = None
    #: the ``usage`` table (DESIGN §12); None in tests that run without it
    usage: UsageStore | None = None
    #: records model calls made outside the chat-completions client (transcriptions, image descriptions)
    usage_recorder: UsageRecorder | None = None
    #: the daily caps
    caps: UsageCaps | None = None
    #: the vectors of every stored turn for ``history_search``, made by the ``memory_index`` plugin (None while off)
    history_index: HistoryIndex | None = None
    #: the MCP servers of ``mcp_servers`` and their tools (DESIGN §13); None in tests that run without them
    mcp: McpManager | None = None
