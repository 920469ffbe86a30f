"""What one turn of the agent carries, passed down as an argument, never ambient.

The dispatcher (or a test, or a bench) builds an :class:`AgentTurn` with what it knows: where streamed text
goes, who stores the final answer, the model when it is not the configured one, and the message being
answered. :meth:`agent.loop.Agent.run_turn` completes it with what the agent decides at the turn's start
(its images, the knowledge base's part, its tools, its deadline) and hands that value to every part of the
turn: the prompt, the model call, the overflow recovery and each tool's :class:`~agent.tools.base.ToolContext`.

Only two context variables stay, for what is truly cross-cutting and reaches code that never sees a turn:
the usage scope (``core/usage.py``: the model client records a call's usage for it) and the reply's urgency
(``agent/slots.py``: the request slots of one endpoint). ``tests/agent/test_turn_passed.py`` keeps it so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from core.errors import TransientLLMError

if TYPE_CHECKING:
    from agent.images import ImageTurn
    from agent.session import SessionState
    from agent.tools.base import ToolSet
    from core.messages import IncomingMessage

T = TypeVar("T")

#: A turn's model calls, tool rounds and retries included, end within this many seconds (DESIGN §2.4): a
#: hung model ends in a short clear message, not minutes of silence. The model client's own retry deadline
#: (agent/llm.py) is shorter, so a long Retry-After ends the call with its own error first.
TURN_DEADLINE = 60.0


class AnswerSink(Protocol):
    """Where a streamed answer's visible text goes while the model writes it."""

    async def text(self, piece: str) -> None:
        """A new piece of visible text."""
        ...

    async def discard(self) -> None:
        """The pieces so far were not the answer: the model went on to call tools."""
        ...


#: ``final(message, text) -> seq``: stores a turn's final answer ``message``, whose reply to the user is
#: ``text``, puts it in the context (through the session handle: :meth:`SessionState.add_answer`) and returns
#: its seq; the dispatcher's keeps ``text`` for its outbox in the same transaction.
FinalAnswer = Callable[[dict[str, Any], str], Awaitable[int]]


@dataclass(frozen=True, slots=True)
class TurnExtras:
    """What the knowledge base adds to a turn: a system prompt section (which scopes it may search, and to cite),
    and with ``knowledge_auto`` the best passages for the user's message, best first."""

    prompt: str = ""
    passages: tuple[str, ...] = ()


class TurnKnowledge(Protocol):
    """The knowledge base as a turn sees it (knowledge/turn.py, set by the ``knowledge`` plugin)."""

    async def for_turn(self, state: SessionState, text: str) -> TurnExtras: ...


class Deadline:
    """When a turn's model calls must have ended (event loop time). Text streaming into the chat moves it on
    (:meth:`extend`): the user is not waiting in silence."""

    __slots__ = ("seconds", "ends", "_scope")

    def __init__(self, seconds: float) -> None:
        #: how long the turn's model calls may take in all, and how far each streamed piece moves the end
        self.seconds = seconds
        self.ends = asyncio.get_running_loop().time() + seconds
        self._scope: asyncio.Timeout | None = None

    async def run(self, call: Awaitable[T]) -> T:
        """Await a model call within what is left; past it, a transient error.

        Only model calls are cut off: what the turn stored so far (its user message, tool results) stays a
        valid context, and the next message of the session starts a fresh turn.
        """
        left = self.ends - asyncio.get_running_loop().time()
        try:
            if left <= 0:
                raise TimeoutError
            async with asyncio.timeout(left) as scope:
                self._scope = scope
                try:
                    return await call
                finally:
                    self._scope = None
        except TimeoutError as exc:
            if asyncio.iscoroutine(call):
                call.close()
            raise TransientLLMError(f"no answer within the turn's {self.seconds:.0f} s deadline") from exc

    def extend(self) -> None:
        """A piece of text reached the chat: the running call's deadline moves to at least ``seconds`` from now
        (a slow local model may write for minutes; one that stops writing still ends in a clear message)."""
        scope = self._scope
        if scope is None:
            return
        later = asyncio.get_running_loop().time() + self.seconds
        if scope.when() is not None and later > scope.when():
            scope.reschedule(later)
            self.ends = later


@dataclass(frozen=True, slots=True)
class AgentTurn:
    """One run of the tool loop. The caller sets the first four fields; :meth:`Agent.run_turn` the rest.

    The value is frozen; the objects it holds that change during the turn (the images' refusal, the tools
    ``find_tools`` offers, the deadline streamed text moves) belong to this turn alone.
    """

    #: where streamed visible text goes (``stream_replies``), or None: no streaming
    sink: AnswerSink | None = None
    #: stores the final answer (the dispatcher keeps the reply for its outbox in the same transaction); None:
    #: the agent stores it like any other message
    final: FinalAnswer | None = None
    #: the turn's model when it is not the configured one (``usage_fallback_model`` over a cap)
    model: str | None = None
    #: the message being answered (who asked, in which chat), for the tools that act in the chat
    message: IncomingMessage | None = None
    #: whether the turn's photo is sent and whether the server refused it (agent/images.py)
    images: ImageTurn | None = None
    #: the knowledge base's part of the turn: a system prompt section and passages
    extras: TurnExtras | None = None
    #: the tools this turn offers (``find_tools`` may offer more); None: every registered tool
    tools: ToolSet | None = None
    #: when the turn's model calls must have ended; None: no deadline
    deadline: Deadline | None = None


@dataclass(slots=True)
class TurnResult:
    """What a turn produced."""

    text: str
    steps: int = 0
    tool_calls: int = 0
    cleared: bool = False
    actions: list[str] = field(default_factory=list)
    #: what the user got, for the log line (``reply_outcome``; ``cleared`` after an overflow cleared it)
    outcome: str = "ok"
