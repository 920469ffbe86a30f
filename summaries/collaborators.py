"""What the summariser needs of its collaborators, as protocols: a token counter per model and the loaded
session contexts it injects a summary into (implemented by ``agent.tokens`` and ``agent.session``, which the
summariser does not import)."""

from __future__ import annotations

from typing import Protocol

from summaries.parts import rough_tokens


class TextCounter(Protocol):
    """Counts a text's tokens for one model (agent.tokens.TokenCounter)."""

    def count_text(self, text: str) -> int: ...


class _Rough:
    """The estimate used when no tokenizer is given (tests and tools outside the app)."""

    @staticmethod
    def count_text(text: str) -> int:
        return rough_tokens(text)


ROUGH = _Rough()


class LiveState(Protocol):
    """A loaded session context, as the summariser updates it (agent.session.SessionState)."""

    summary: str | None
    summary_turns: int

    def set_summary(self, summary: str | None, turns: int, through_seq: int = 0) -> None: ...

    def mark_summarized(self, through_seq: int) -> None: ...


class LiveStates(Protocol):
    """The loaded session contexts (agent.session.LiveSessions)."""

    def peek(self, session_id: str) -> LiveState | None: ...
