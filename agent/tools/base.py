"""Tool base and registry.

A tool is a typed async function whose docstring becomes the model's description, in the manner of
simonw/llm's ``Tool.function``. Its first parameter is a :class:`ToolContext`, which tells it which
session it serves (tools never see another session's data) and carries the services it may use: the
application's parts, the conversation store and the daily memory. A tool takes what it needs from its
context, never from module globals, so a plugin's tool is tested by building a context.
"""

from __future__ import annotations

import inspect
import logging
import types
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # tools stay importable on their own
    from config.settings import Config
    from core.messages import IncomingMessage
    from core.records import SessionInfo
    from knowledge.base import KnowledgeBase
    from memory.daily import DailyMemory
    from memory.history_index import HistoryIndex
    from memory.person import PersonNotes
    from memory.search import MemorySearch
    from store.store import Store

logger = logging.getLogger(__name__)

#: Every tool result is cut to this many characters when it is created.
TOOL_RESULT_CAP = 50_000

class AdminCheck(Protocol):
    """Whether a message comes from an admin (``dispatcher.admins.Admins``)."""

    def is_admin(self, msg: IncomingMessage) -> bool: ...


class ToolServices(Protocol):
    """The application's parts as tools read them. The object handed over is the whole
    ``dispatcher.commands.Services``; this names what tools use of it, so the agent stays below the dispatcher."""

    @property
    def store(self) -> Store: ...

    @property
    def memory(self) -> DailyMemory: ...

    @property
    def people(self) -> PersonNotes: ...

    @property
    def admins(self) -> AdminCheck: ...

    @property
    def memory_search(self) -> MemorySearch | None: ...

    @property
    def history_index(self) -> HistoryIndex | None: ...

    @property
    def knowledge(self) -> KnowledgeBase | None: ...


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may know about the call: whose session, the settings in force, and the services."""

    session_id: str
    config: Config
    data_dir: Path = field(default_factory=Path)
    #: the application's parts, or None outside the app
    services: ToolServices | None = None
    #: the conversation store, or None
    store: Store | None = None
    #: the daily memory files, or None
    memory: DailyMemory | None = None
    #: the first stored message of the turn being answered (0: unknown); searches leave it and later ones out
    turn_start_seq: int = 0
    #: who the session belongs to (private chat or group, its owner), or None outside a session's turn
    info: SessionInfo | None = None
    #: the message being answered (who asked, in which chat; the turn's ``AgentTurn.message``), or None outside
    #: a chat turn: a tool that acts in the chat (``schedule_message``) reads who asked and where from it
    message: IncomingMessage | None = None
    #: the running turn's tools, or None outside a turn: ``find_tools`` offers more through it
    tools: ToolSet | None = None

    def with_services(self, services: ToolServices | None) -> ToolContext:
        """This context with ``services``, and the store and memory taken from them where not set."""
        if services is None or self.services is services:
            return self
        return replace(self, services=services,
                       store=self.store if self.store is not None else services.store,
                       memory=self.memory if self.memory is not None else services.memory)


ToolFunction = Callable[..., Awaitable[str] | str]

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _json_type(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _json_type(args[0])
    if origin in (list, tuple):
        (item,) = typing.get_args(annotation)[:1] or (str,)
        return {"type": "array", "items": _json_type(item)}
    return {"type": _JSON_TYPES.get(annotation, "string")}


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: ToolFunction

    @classmethod
    def from_function(cls, fn: ToolFunction, name: str | None = None) -> Tool:
        """Build a tool from a typed function ``fn(ctx, **params)``; its docstring is the description."""
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
        props: dict[str, Any] = {}
        required: list[str] = []
        params = list(sig.parameters.values())[1:]  # skip the ToolContext
        doc = inspect.getdoc(fn) or ""
        arg_docs = _arg_docs(doc)
        for p in params:
            schema = _json_type(hints.get(p.name, str))
            if p.name in arg_docs:
                schema["description"] = arg_docs[p.name]
            props[p.name] = schema
            if p.default is inspect.Parameter.empty:
                required.append(p.name)
        description = doc.split("\n\n", 1)[0].strip()
        return cls(name=name or fn.__name__, description=description,
                   parameters={"type": "object", "properties": props, "required": required},
                   function=fn)

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    async def call(self, ctx: ToolContext, arguments: dict[str, Any]) -> str:
        """Run the tool; raise whatever it raises (the loop turns that into a result for the model)."""
        allowed = set(self.parameters.get("properties", {}))
        unknown = set(arguments) - allowed
        if unknown:
            raise ValueError(f"unknown argument(s) for {self.name}: {', '.join(sorted(unknown))}")
        missing = [p for p in self.parameters.get("required", []) if p not in arguments]
        if missing:
            raise ValueError(f"missing argument(s) for {self.name}: {', '.join(missing)}")
        result = self.function(ctx, **arguments)
        if inspect.isawaitable(result):
            result = await result
        return result if isinstance(result, str) else str(result)


def _arg_docs(doc: str) -> dict[str, str]:
    """Parse ``name: description`` lines under an ``Args:`` heading."""
    out: dict[str, str] = {}
    if "Args:" not in doc:
        return out
    for line in doc.split("Args:", 1)[1].splitlines():
        line = line.strip()
        if ":" in line:
            name, _, desc = line.partition(":")
            if name.isidentifier():
                out[name] = desc.strip()
    return out


def tool(fn: ToolFunction | None = None, *, name: str | None = None):
    """Decorator: turn a typed function into a :class:`Tool`."""
    def wrap(f: ToolFunction) -> Tool:
        return Tool.from_function(f, name=name)
    return wrap(fn) if fn is not None else wrap


def bind_services(t: Tool, services: ToolServices) -> Tool:
    """``t``, called with ``services`` in its context when the caller's context has none."""
    function = t.function

    def with_services(ctx: ToolContext, **arguments: Any) -> Awaitable[str] | str:
        return function(ctx.with_services(services), **arguments)

    return replace(t, function=with_services)


@dataclass(frozen=True, slots=True)
class ToolQuery:
    """What a turn's tool selection knows: whose session, the message, the tools its kept turns used, the room."""

    session_id: str
    info: SessionInfo | None = None
    #: the text of the message being answered
    text: str = ""
    #: tools called in the session's kept turns
    used: frozenset[str] = frozenset()
    #: the model's context window, in tokens
    window: int = 0
    #: ``count(text)``: tokens of a text for the turn's model
    count: Callable[[str], int] = len
    #: the message being answered (who asked, in which chat), or None outside a chat turn
    message: IncomingMessage | None = None


class ToolSet:
    """The tools of one turn: ``schemas()`` is what the next model call offers, ``get`` finds any tool this
    chat may call. A tool may :meth:`offer` more during the turn (``find_tools``); they are in the next call."""

    def __init__(self, available: list[Tool], offered: list[str] | None = None) -> None:
        self._available = {t.name: t for t in available}
        self._offered = list(self._available) if offered is None else [n for n in offered if n in self._available]
        self._schemas: tuple[list[str], list[dict[str, Any]]] | None = None

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` list of the next model call (the same list while the offer is unchanged)."""
        if self._schemas is None or self._schemas[0] != self._offered:
            self._schemas = (list(self._offered), [self._available[name].schema() for name in self._offered])
        return self._schemas[1]

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, if this chat may call it."""
        return self._available.get(name)

    def names(self) -> list[str]:
        """The names offered to the model."""
        return list(self._offered)

    def offer(self, names: list[str]) -> list[str]:
        """Offer these tools from the next model call on; returns those newly offered."""
        added = [n for n in names if n in self._available and n not in self._offered]
        self._offered.extend(added)
        return added


class ToolSelector(Protocol):
    """Chooses a turn's tools (mcp_tools/ adds its servers' tools and narrows a long list, DESIGN §13)."""

    async def select(self, registry: ToolRegistry, query: ToolQuery) -> ToolSet:
        """The tools this turn offers."""
        ...


class ToolRegistry:
    """The tools on offer, by name. Registering a name twice replaces the earlier tool."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        #: chooses each turn's tools; None: every registered tool, every turn
        self.selector: ToolSelector | None = None
        for t in tools or []:
            self.register(t)

    async def for_turn(self, query: ToolQuery) -> ToolSet:
        """The tools one turn offers: the selector's choice, or every registered tool."""
        if self.selector is not None:
            return await self.selector.select(self, query)
        return ToolSet(list(self._tools.values()))

    def tools(self) -> list[Tool]:
        """The registered tools, in registration order."""
        return list(self._tools.values())

    def register(self, t: Tool | ToolFunction) -> Tool:
        """Add a tool (or a typed function, which becomes one)."""
        if not isinstance(t, Tool):
            t = Tool.from_function(t)
        self._tools[t.name] = t
        return t

    def unregister(self, name: str) -> None:
        """Remove a tool if present."""
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, if any."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Registered tool names."""
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` list."""
        return [t.schema() for t in self._tools.values()]

    def __len__(self) -> int:
        return len(self._tools)


def cap_result(text: str, limit: int = TOOL_RESULT_CAP) -> str:
    """Cut a tool result to ``limit`` characters, with a notice of the original length."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n\n[Tool result truncated: showing {limit:,} of {len(text):,} characters]"
