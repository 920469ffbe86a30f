"""What the summariser needs of its collaborators, as protocols: a token counter per model and the loaded
session contexts it injects a summary into (implemented by ``agent.tokens`` and ``agent.sessions``, which the
summariser does not import)."""

from __future__ import annotations

from collections.abc import Callable
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
    """A loaded session context, as the summariser reads it (agent.session.SessionState)."""

    @property
    def summary(self) -> str | None: ...

    @property
    def summary_turns(self) -> int: ...

    @property
    def summarized_through_seq(self) -> int: ...


class SummaryTarget(Protocol):
    """Where a summary goes: the session owner's port (agent.sessions.LiveSessions), which writes the store and
    the loaded context together. The summariser never writes either itself."""

    def peek(self, session_id: str) -> LiveState | None:
        """The loaded context, to read, if any."""
        ...

    async def inject(self, session_id: str, summary: str, turns: int, through_seq: int,
                     superseded: Callable[[], bool]) -> bool:
        """Make ``summary`` the session's injected summary; False (and none stored) when ``superseded()`` turned
        true while storing it."""
        ...

    async def mark_summarized(self, session_id: str, through_seq: int) -> None:
        """Messages through ``through_seq`` are summarised; the summary stays."""
        ...

    async def reset_summary(self, session_id: str, through_seq: int) -> None:
        """No injected summary; messages through ``through_seq`` summarised."""
        ...
