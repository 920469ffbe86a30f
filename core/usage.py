"""Who a model call is for: the scope every call's usage row is recorded under (DESIGN §12).

The model client does not know sessions or speakers; the code that asks for a call does. It opens a
:func:`usage_scope` (the turn for ``reply``, the flush for ``flush``, a summary job for ``summary``), and the
client hands each call's usage to its :class:`UsageSink`, which reads the scope. A context variable carries
it, so the scope reaches the model calls inside the turn (tool rounds, retries) without every signature
between them taking it, and a task started inside a scope (a summary job) sets its own.

It is one of the two context variables the project keeps (the other is ``agent/slots.py``'s ``urgent``), because
it is cross-cutting: it reaches the model client, which serves replies, summaries, flushes and media alike and
knows no turn. A turn's own arguments are not ambient: they travel as ``agent.turn.AgentTurn``
(``tests/agent/test_turn_passed.py`` fails on any other ``ContextVar``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Protocol

from core.llm import Usage

#: The purposes of DESIGN §1.7 (``other``: a call made outside any scope, e.g. a probe).
PURPOSES = ("reply", "summary", "flush", "transcribe", "describe", "other")


def speaker_of(channel: str, user_id: str) -> str:
    """The speaker's key in ``usage`` and the person cap: ``<channel>:<user id>``."""
    return f"{channel}:{user_id}"


@dataclass(frozen=True, slots=True)
class UsageScope:
    """The session and speaker (``<channel>:<user id>``, "" for none) a call is for, and why it is made."""

    session_id: str = ""
    user_id: str = ""
    purpose: str = "other"
    #: when set, each recorded call adds its tokens to ``tally[0]`` (what a turn spent, for the caps' estimate)
    tally: list[int] | None = None


_NO_SCOPE = UsageScope()
_SCOPE: ContextVar[UsageScope | None] = ContextVar("usage_scope", default=None)


def current_scope() -> UsageScope:
    """The scope of the running code (an empty ``other`` scope outside any)."""
    return _SCOPE.get() or _NO_SCOPE


@contextlib.contextmanager
def usage_scope(session_id: str | None = None, user_id: str | None = None, purpose: str | None = None,
                tally: list[int] | None = None) -> Iterator[UsageScope]:
    """Within the block, model calls are recorded for this scope; what is not given is kept from the outer one.

    Ambient on purpose (a context variable): it is cross-cutting, read by the model client's usage sink for
    every purpose, not one of a turn's arguments (those travel as ``agent.turn.AgentTurn``)."""
    outer = current_scope()
    scope = replace(outer, **{k: v for k, v in (("session_id", session_id), ("user_id", user_id),
                                                  ("purpose", purpose), ("tally", tally)) if v is not None})
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


class UsageSink(Protocol):
    """Where a model client hands each call's usage (:class:`usage.recorder.UsageRecorder`)."""

    async def model_call(self, model: str, usage: Usage, request: list[dict[str, Any]],
                         tools: list[dict[str, Any]] | None, answer: str) -> None:
        """One call to ``model`` answered: ``usage`` as the server reported it (zeros when it reported none;
        the sink then counts ``request``, ``tools`` and ``answer`` itself). Never raises."""
        ...
