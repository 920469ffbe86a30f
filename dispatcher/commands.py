"""Chat commands: parsing ``/cmd@botname args``, what a handler receives (with the application's parts,
:class:`Services`), and the registry the dispatcher consults."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from config.settings import NESTED_SECRET_KEYS, SECRET_KEYS
from core.messages import IncomingMessage
from core.records import SessionInfo

logger = logging.getLogger(__name__)

#: Commands whose arguments are secrets: only the command's name is ever kept.
SECRET_COMMANDS = frozenset({"auth"})
_COMMAND = re.compile(r"^/(?P<command>[A-Za-z0-9_]+)(?:@(?P<mention>[A-Za-z0-9_]+))?(?:\s+(?P<args>.*))?$", re.S)

if TYPE_CHECKING:
    from agent.loop import Agent
    from agent.sessions import SessionManager
    from agent.tools.base import ToolRegistry
    from channels.base import BaseChannel
    from config.settings import ConfigHolder
    from core.llm import BaseLLM
    from dispatcher.admins import Admins
    from knowledge.base import KnowledgeBase
    from mcp_tools.manager import McpManager
    from memory.daily import DailyMemory
    from memory.history_index import HistoryIndex
    from memory.person import PersonNotes
    from memory.search import MemorySearch
    from store.locks import Locks
    from store.store import Store
    from store.usage import UsageStore
    from summaries.summarizer import Summarizer
    from usage.caps import UsageCaps
    from usage.recorder import UsageRecorder


@dataclass(frozen=True, slots=True)
class CommandObject:
    """A parsed ``/cmd@botname args``."""

    command: str
    args: str = ""
    mention: str | None = None
    prefix: str = "/"

    @property
    def argv(self) -> list[str]:
        """The arguments split on whitespace."""
        return self.args.split()


def parse_command(text: str) -> CommandObject | None:
    """Parse a command (name lower-cased), or return None when the text is not one."""
    match = _COMMAND.match(text.strip())
    if match is None:
        return None
    return CommandObject(command=match["command"].lower(), args=(match["args"] or "").strip(),
                         mention=match["mention"])


def secret_free(command: CommandObject) -> str | None:
    """What may be kept of a command whose arguments hold a secret (DESIGN §1.6), or None when it holds none:
    of ``/auth <password>`` its name only, of ``/config <secret key> <value>`` (refused) not the value."""
    if command.command in SECRET_COMMANDS and command.args:
        return f"/{command.command}"  # never store a password
    if command.command == "config":
        argv = command.argv
        if len(argv) > 1 and argv[0].split(".")[0].lower() in SECRET_KEYS | NESTED_SECRET_KEYS:
            # /config refuses to set a secret, but the value was typed into the chat: never store it.
            return f"/config {argv[0]} ***"
    return None


def keeps_no_secret(text: str) -> bool:
    """True when a typed line may be kept as it is (the terminal's line history asks)."""
    command = parse_command(text)
    return command is None or secret_free(command) is None


@dataclass(frozen=True, slots=True)
class CommandRequest:
    """One command invocation."""

    message: IncomingMessage
    command: CommandObject
    #: the session the command was sent in, as :func:`dispatcher.identity.session_for` derived it
    session: SessionInfo
    is_admin: bool
    #: the application's services (config, store, sessions, agent, summariser, ...), for built-ins
    services: Services | None = None
    #: the channel the command came through (its chat-side state, e.g. the terminal's line history)
    channel: BaseChannel | None = None

    @property
    def session_id(self) -> str:
        """The session's id."""
        return self.session.session_id

    @property
    def user_key(self) -> str:
        """``<channel>:<user id>``, as in ``admin_users``."""
        return f"{self.message.channel}:{self.message.user_id}"


CommandHandler = Callable[[CommandRequest], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class Command:
    """A registered command."""

    name: str
    description: str
    handler: CommandHandler
    admin_only: bool = False
    private_only: bool = False


class CommandRegistry:
    """Commands by name. Registering a name again replaces it (so a reload never registers twice)."""

    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}

    def register(self, command: Command) -> None:
        """Add or replace a command."""
        self._commands[command.name] = command

    def unregister(self, name: str) -> None:
        """Remove a command if present."""
        self._commands.pop(name, None)

    def get(self, name: str) -> Command | None:
        """The command called ``name``."""
        return self._commands.get(name)

    def all(self) -> list[Command]:
        """Every command, in registration order."""
        return list(self._commands.values())


class Plugins(Protocol):
    """What commands and the console ask of the plugin manager (``plugins/manager.py`` ``PluginManager``)."""

    def check_settings(self, plugins: dict[str, Any]) -> str | None:
        """The first problem with a ``plugins`` setting, or None."""
        ...

    async def stopping(self) -> None:
        """Tell the plugins the bot stops."""
        ...


class ConsoleLinks(Protocol):
    """What ``/console`` asks of the web console this process serves (``console/server.py`` ``WebConsole``)."""

    def new_link(self, asked_by: str) -> str:
        """A new one-time login link for ``asked_by``, logged and printed; the sentence that gives it."""
        ...


@dataclass(eq=False)
class Services:
    """The parts built at start that commands, tools and plugins may use, each with its type.

    Built at start by bootstrap/compose.py in dependency order and handed to the dispatcher (which hands it on in
    every :class:`CommandRequest`), the plugin manager and the console at construction. It lives here, beside the
    request that carries it, so that everything above the dispatcher may name it; the layers below see only what
    they use (a tool's ``agent.tools.base.ToolServices``, a channel's ``commands``, ``window`` and ``keep_line``).
    The dispatcher itself is not among them: commands act on sessions, the store and the admins, not on the
    message path. Two parts are optional: the plugin manager (set by ``plugins.manager.install``, which needs the
    services to load the plugins) and the memory search (made by the ``memory_index`` plugin, which may be
    disabled).
    """

    config: ConfigHolder
    store: Store
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
    #: the plugin manager, once ``plugins.manager.install`` has loaded the plugins
    plugins: Plugins | None = None
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
    #: the web console this process serves, once started (None when it is off or another process serves it)
    console: ConsoleLinks | None = None
    #: the MCP servers of ``mcp_servers`` and their tools (DESIGN §13); None in tests that run without them
    mcp: McpManager | None = None
    #: the knowledge base (DESIGN §14), made by the ``knowledge`` plugin (None while it is off)
    knowledge: KnowledgeBase | None = None
