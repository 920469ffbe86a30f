"""What the store hands out and takes in: plain frozen values, free of SQLAlchemy."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """Who a session belongs to, as derived by the dispatcher."""

    session_id: str
    channel: str
    chat_id: str
    user_id: str = ""
    is_group: bool = False
    title: str = ""


def is_shared_group(info: SessionInfo) -> bool:
    """True for a group session shared by all its members."""
    return info.is_group and info.session_id == f"{info.channel}:group:{info.chat_id}"


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A session's persisted state."""

    session_id: str
    context_start_seq: int
    summary: str | None
    summary_turns: int
    summarized_through_seq: int
    last_seq: int
    last_active: datetime


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message with its per-session sequence number."""

    seq: int
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PendingIncoming:
    """An incoming message stored but not yet answered."""

    id: int
    session_id: str
    user_seq: int | None
    payload: dict[str, Any]
    #: the outbox: the reply kept before it was sent, if any
    reply: str | None = None


@dataclass(frozen=True, slots=True)
class SummaryJob:
    """A journalled summary job."""

    id: int
    session_id: str
    reason: str
    from_seq: int
    through_seq: int
    attempts: int
