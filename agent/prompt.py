"""A request's fixed part and its room: the system prompt, the history budget and the answer cap.

Every request of a session carries the system prompt (the persona, MEMORY.md, PERSON.md, the knowledge base's
section), the injected summary and the tools' schemas besides its turns. :class:`Prompt` writes the system
prompt, counts that fixed part (counts are cached: the persona and a turn's tools are the same from call to
call) and derives from it the history's budget and the answer's ``max_tokens``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent.context import Budget, history_budget
from agent.tokens import TokenCounter, output_cap
from agent.window import ModelWindows
from memory.person import prompt_person

if TYPE_CHECKING:
    from agent.session import SessionState
    from agent.turn import TurnExtras
    from config.settings import Config


class Prompt:
    """The system prompt of a session and the token arithmetic of its requests, for one model at a time."""

    def __init__(self, *, config: Callable[[], Config], counter: Callable[[str], TokenCounter],
                 windows: ModelWindows, notes: Callable[[str], str | None] | None = None,
                 person_notes: Callable[[str], str | None] | None = None) -> None:
        self.config = config
        self.counter = counter
        self.windows = windows
        self.notes = notes
        self.person_notes = person_notes
        self._prompt_tokens: dict[tuple[str, str], int] = {}
        self._tool_tokens: dict[tuple[str, str], int] = {}
        self._last_tools: tuple[str, list[dict[str, Any]], int] | None = None

    def system(self, state: SessionState, extras: TurnExtras | None = None) -> str:
        """The persona plus the session's long-term notes (MEMORY.md) and, in a private chat or a per-member group
        session, its owner's person notes (PERSON.md), never in a shared group session (DESIGN §1.6), and the
        knowledge base's section of the turn (``extras``). The same text every turn while the files are
        unchanged, so a provider's prompt cache keeps the prefix."""
        prompt = self.config().character_desc
        if self.notes is not None:
            notes = self.notes(state.session_id)
            if notes:
                prompt += "\n\n# Long-term notes for this conversation (MEMORY.md)\n" + notes
        person = prompt_person(state.info) if self.person_notes is not None else None
        if person is not None:
            about = self.person_notes(person)
            if about:
                prompt += ("\n\n# What the person you are talking with asked you to remember about them "
                           "(PERSON.md)\n" + about)
        if extras is not None and extras.prompt:
            prompt += "\n\n" + extras.prompt
        return prompt

    def budget(self, state: SessionState, system: str, model: str, tools: list[dict[str, Any]] | None) -> Budget:
        """The turn and token budgets for the history of a request on ``model`` offering ``tools``."""
        cfg = self.config()
        # The tools' schemas go with every request: on a small window they are a large share of it.
        reserved = self.reserved(state, system, model) + self.tools_tokens(model, tools)
        return Budget(max_turns=cfg.agent_max_context_turns,
                      max_tokens=history_budget(cfg.agent_max_context_tokens, self.windows(model), reserved))

    def reserved(self, state: SessionState, system: str, model: str) -> int:
        """Tokens of the system prompt and the injected summary."""
        counter = self.counter(model)
        reserved = self._prompt_tokens.get((model, system))
        if reserved is None:
            # The persona is the same for every session (MEMORY.md aside): count it once per model.
            reserved = counter.count_text(system)
            if len(self._prompt_tokens) >= 256:
                self._prompt_tokens.clear()
            self._prompt_tokens[(model, system)] = reserved
        if state.summary:
            reserved += counter.count_text(state.summary) + 40
        return reserved

    def request_tokens(self, state: SessionState, system: str, model: str, history_tokens: int,
                       tools: list[dict[str, Any]] | None) -> int:
        """Our count of a request: history, system prompt and summary, tools' schemas."""
        return history_tokens + self.reserved(state, system, model) + self.tools_tokens(model, tools)

    def answer_cap(self, state: SessionState, system: str, model: str, history_tokens: int,
                   tools: list[dict[str, Any]] | None) -> int:
        """``max_tokens`` for a request: ``agent_max_output_tokens``, never more than the window left."""
        request = self.request_tokens(state, system, model, history_tokens, tools)
        return output_cap(self.config().agent_max_output_tokens, self.windows(model), request)

    def tools_tokens(self, model: str, tools: list[dict[str, Any]] | None) -> int:
        """Tokens of the tools' schemas in a request (each set counted once per model)."""
        if not tools:
            return 0
        last = self._last_tools
        # A turn's set is the same list each call; the next turn's (a new list) usually holds the same tools.
        if last is not None and last[0] == model:
            if last[1] is tools:
                return last[2]
            if _same_schemas(last[1], tools):
                self._last_tools = (model, tools, last[2])
                return last[2]
        text = json.dumps(tools)
        tokens = self._tool_tokens.get((model, text))
        if tokens is None:
            if len(self._tool_tokens) >= 64:  # the sets a selector makes vary with the message
                self._tool_tokens.clear()
            tokens = self._tool_tokens[(model, text)] = self.counter(model).count_text(text)
        self._last_tools = (model, tools, tokens)
        return tokens


def _same_schemas(known: list[dict[str, Any]], tools: list[dict[str, Any]]) -> bool:
    """Whether ``tools`` are the schemas of the same tools as ``known``: each with the same name and description and
    the very same ``parameters`` object (a tool's ``schema()`` wraps its own parameters in a new dict each call,
    so each turn's list is new; comparing these is much cheaper than writing the list as JSON again to look it
    up). ``known`` holds on to its parameters, so their identity cannot be another object's."""
    if len(known) != len(tools):
        return False
    try:
        for a, b in zip(known, tools, strict=True):
            fa, fb = a["function"], b["function"]
            if (fa["parameters"] is not fb["parameters"] or fa["name"] != fb["name"]
                    or fa["description"] != fb["description"] or a["type"] != b["type"] or len(fa) != len(fb)):
                return False
    except (KeyError, TypeError):  # not a tool's schema(): compare them as JSON
        return False
    return True
