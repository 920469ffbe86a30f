"""The staged overflow recovery (DESIGN §2.3): what a turn does when the provider says the request is too long.

1. Everything in the context goes to the summariser as an ``overflow`` job (saved to memory, not injected).
2. When the error named the real window (or our count was wrong), the context is fitted to that window, a long
   user message cut to :data:`OVERFLOW_MIN_USER_CHARS`.
3. Then it keeps 5, 2 and 1 turn(s) (:data:`OVERFLOW_STAGES`), calling the model again after each stage.
4. If even one turn is too long, the caller clears the context and tells the user (``CLEARED_REPLY``).

Each retry learns the window again from its error (agent/window.py).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Protocol

from agent.context import Budget, PrepareResult, overflow_trim, prepare_context
from core.errors import ContextOverflowError
from core.llm import LLMResponse

if TYPE_CHECKING:
    from agent.session import DropSink, SessionState
    from agent.tokens import TokenCounter

logger = logging.getLogger(__name__)

#: Overflow recovery keeps this many turns at each stage, then clears the context.
OVERFLOW_STAGES = (5, 2, 1)
#: Fitting a refused request to the window its error named cuts the user's text down to this many characters
#: (the usual floor is 1,000: on a 2,048-token window a long Chinese message cut to it still leaves no room
#: for an answer).
OVERFLOW_MIN_USER_CHARS = 200


class Request(Protocol):
    """The refused request as the recovery sees it: the tool loop's model call for the same system prompt,
    tools and turn, made again on whatever context the recovery leaves."""

    def budget(self) -> Budget:
        """The history's budget for this request (as the window is now known)."""
        ...

    async def apply(self, prepared: PrepareResult) -> None:
        """Make ``prepared`` the session's context (the dropped turns went to the overflow job already)."""
        ...

    async def attempt(self, history_tokens: int) -> LLMResponse:
        """Render the context and call the model; raises :class:`ContextOverflowError` when still too long."""
        ...

    def learn(self, error: ContextOverflowError, history_tokens: int) -> bool:
        """Learn the window from a "too long" error; True when it named the window (or showed our count wrong)."""
        ...


async def recover(state: SessionState, request: Request, *, learned: bool, counter: TokenCounter,
                  sink: DropSink, actions: list[str]) -> LLMResponse | None:
    """Recover from a "too long" answer to ``request``; None means even one turn is too long (clear it).

    ``learned``: the first error named the window. Each stage taken is added to ``actions``.
    """
    # DESIGN §2.3: save everything in context to memory, then trim harder, stage by stage.
    if state.messages:
        first = next((m.seq for m in state.messages if m.seq), 0)
        last = max((m.seq for m in state.messages), default=0)
        if first and last:
            await sink.submit(state.session_id, "overflow", first, last)
    if learned:  # the error named the real window (or count): fit the context to it first (2.1 cuts a long text)
        budget = dataclasses.replace(request.budget(), min_user_chars=OVERFLOW_MIN_USER_CHARS)
        fitted = prepare_context(state.messages, budget, counter)
        await request.apply(fitted)
        actions.append("overflow recovery: fitted to the window the server named")
        try:
            return await request.attempt(fitted.tokens)
        except ContextOverflowError as exc:
            logger.warning("session %s: still too long within the window the server named", state.session_id)
            request.learn(exc, fitted.tokens)
    for keep in OVERFLOW_STAGES:
        trimmed = overflow_trim(state.messages, keep, counter)
        await request.apply(trimmed)
        actions.append(f"overflow recovery: kept {keep} turn(s)")
        try:
            return await request.attempt(trimmed.tokens)
        except ContextOverflowError as exc:
            logger.warning("session %s: still too long with %d turn(s)", state.session_id, keep)
            request.learn(exc, trimmed.tokens)
    return None
