"""SQLAlchemy models. The ``sessions`` and ``messages`` columns are part of the contract (DESIGN §1.7)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    """The current time, aware, in UTC."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator):
    """A timezone-aware UTC datetime on every backend (SQLite stores naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# BigInteger ids that still autoincrement on SQLite.
BigId = BigInteger().with_variant(Integer, "sqlite")


class Base(DeclarativeBase):
    """Declarative base of every table."""


class SessionRow(Base):
    """One conversation history."""

    __tablename__ = "sessions"

    session_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    channel: Mapped[str] = mapped_column(String(32))
    chat_id: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[str] = mapped_column(String(255), default="")
    is_group: Mapped[bool] = mapped_column(Boolean, default=False)
    title: Mapped[str] = mapped_column(String(255), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_active: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    #: the seq of the first message in the model's context
    context_start_seq: Mapped[int] = mapped_column(Integer, default=1)
    #: the summary injected into the first kept user message, or null
    summary: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: how many turns the summary covers, for the injection header
    summary_turns: Mapped[int] = mapped_column(Integer, default=0)
    #: every message with seq <= this has been summarised
    summarized_through_seq: Mapped[int] = mapped_column(Integer, default=0)
    #: the highest seq allocated so far (seqs are allocated without a MAX() scan)
    last_seq: Mapped[int] = mapped_column(Integer, default=0)


class MessageRow(Base):
    """One message of a session, as sent to the model."""

    __tablename__ = "messages"
    __table_args__ = (UniqueConstraint("session_id", "seq", name="uq_messages_session_seq"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(
        String(255), ForeignKey("sessions.session_id", ondelete="CASCADE")
    )
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class InboxRow(Base):
    """An incoming platform message: dedup by (channel, message_id), and crash resume while pending."""

    __tablename__ = "inbox"
    __table_args__ = (
        UniqueConstraint("channel", "message_id", name="uq_inbox_channel_message"),
        Index("ix_inbox_status", "status"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    channel: Mapped[str] = mapped_column(String(32))
    message_id: Mapped[str] = mapped_column(String(255))
    session_id: Mapped[str] = mapped_column(String(255), index=True)
    #: seq of the stored user message this produced, if it reached the agent
    user_seq: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: the IncomingMessage, so a reply can be sent after a restart
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: "pending" until the reply is sent, then "done"
    status: Mapped[str] = mapped_column(String(16), default="pending")
    #: the outbox: the final reply, stored before it is sent, so a restart sends it instead of a new turn
    reply: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)


class SummaryJobRow(Base):
    """A journalled summary job, so unfinished ones run again after a restart."""

    __tablename__ = "summary_jobs"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(255), index=True)
    reason: Mapped[str] = mapped_column(String(16))  # trim, restore, clear, compact, overflow
    from_seq: Mapped[int] = mapped_column(Integer)
    through_seq: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default="pending", index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class AdminGrantRow(Base):
    """A user made admin through ``/auth``."""

    __tablename__ = "admin_grants"

    user_key: Mapped[str] = mapped_column(String(255), primary_key=True)  # "<channel>:<user id>"
    granted_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


# --- semantic memory index (issue 18) -------------------------------------------------------------------
class MemoryChunkRow(Base):
    """One indexed passage of a session's memory (a daily file line, a note) and its embedding."""

    __tablename__ = "memory_chunks"
    __table_args__ = (Index("ix_memory_chunks_session_id", "session_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(255))
    #: the file the passage is in: "YYYY-MM-DD.md" or "MEMORY.md"
    source: Mapped[str] = mapped_column(String(64))
    #: "summary" (a daily file section) or "note" (MEMORY.md)
    kind: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text)
    #: the embedding model's name ("" when semantic search was off); vectors of another model are not compared
    model: Mapped[str] = mapped_column(String(255), default="")
    dim: Mapped[int] = mapped_column(Integer, default=0)
    #: little-endian float32, unit length; null when semantic search was off
    vector: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


# --- history vectors (issue 34) -------------------------------------------------------------------------
class MessageVectorRow(Base):
    """The embedding of one stored user or assistant message, for ``history_search`` (store/message_vectors.py).

    Deleted with its message (the foreign key cascades) and with its session (``/forget``, cleanup).
    """

    __tablename__ = "message_vectors"
    __table_args__ = (Index("ix_message_vectors_session", "session_id", "message_id"),)

    message_id: Mapped[int] = mapped_column(BigId, ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True,
                                            autoincrement=False)
    session_id: Mapped[str] = mapped_column(String(255))
    seq: Mapped[int] = mapped_column(Integer)
    #: the embedding model's name; vectors of another model are not compared
    model: Mapped[str] = mapped_column(String(255))
    #: the int8 vector's scale (the float vector is ``vector * scale``); 0 for a message without text
    scale: Mapped[float] = mapped_column(Float)
    #: int8 components, one byte each; empty for a message without text
    vector: Mapped[bytes] = mapped_column(LargeBinary)


# --- group background (issue 20) ------------------------------------------------------------------------
class GroupMessageRow(Base):
    """A group message the bot saw but was not asked about (``kind`` "message"), or a trigger mark.

    Keyed by the group (channel and chat id), not by a session: shared and per-member group sessions
    see the same background. A "trigger" row (empty text) marks where the bot was last asked, so the next
    request shows only what was said since (DESIGN §1.3, "Group background").
    """

    __tablename__ = "group_messages"
    __table_args__ = (Index("ix_group_messages_chat", "channel", "chat_id", "created_at"),
                      Index("ix_group_messages_created_at", "created_at"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    channel: Mapped[str] = mapped_column(String(32))
    chat_id: Mapped[str] = mapped_column(String(255))
    user_name: Mapped[str] = mapped_column(String(255), default="")
    text: Mapped[str] = mapped_column(Text, default="")
    #: "message" (background) or "trigger" (the bot was asked here)
    kind: Mapped[str] = mapped_column(String(16), default="message")
    #: when the platform says it was sent (shown to the model as HH:MM)
    sent_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    #: when the bot received it: orders the group's rows and drives retention
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


# --- reminders (issue 30) --------------------------------------------------------------------------------
class ReminderRow(Base):
    """A message the bot sends at ``due_at`` in the chat of ``session_id`` (DESIGN §1.7, §12)."""

    __tablename__ = "reminders"
    __table_args__ = (Index("ix_reminders_status_due", "status", "due_at"),
                      Index("ix_reminders_session_id", "session_id"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(255))
    #: "<channel>:<user id>" of who set it (only they or an admin cancel it in a group)
    created_by: Mapped[str] = mapped_column(String(255))
    due_at: Mapped[datetime] = mapped_column(UTCDateTime)
    #: null for a one-off reminder, else the rule of a recurring one
    every: Mapped[str | None] = mapped_column(String(64), nullable=True)
    text: Mapped[str] = mapped_column(Text)
    #: "pending", "sent" or "cancelled"
    status: Mapped[str] = mapped_column(String(16), default="pending")
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    #: the message that set it (IncomingMessage JSON): where and how it is sent
    target: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    #: sent after it fell due while no process ran (the last time it fired)
    late: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


# --- usage (issue 31) ------------------------------------------------------------------------------------
class UsageRow(Base):
    """One model call's tokens (DESIGN §1.7, §12)."""

    __tablename__ = "usage"
    __table_args__ = (Index("ix_usage_created_at", "created_at"),
                      Index("ix_usage_user_created", "user_id", "created_at"),
                      Index("ix_usage_session_created", "session_id", "created_at"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(255))
    #: the speaker, "<channel>:<user id>" ("" for calls no person asked for)
    user_id: Mapped[str] = mapped_column(String(255))
    model: Mapped[str] = mapped_column(String(255))
    #: "reply", "summary", "flush" or "transcribe"
    purpose: Mapped[str] = mapped_column(String(16))
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class UsageDailyRow(Base):
    """The ``usage`` rows older than 400 days, summed per day in the configured zone (store/usage.py)."""

    __tablename__ = "usage_daily"

    #: the day, ``YYYY-MM-DD`` in the zone configured when the rows were summed
    day: Mapped[str] = mapped_column(String(10), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    model: Mapped[str] = mapped_column(String(255), primary_key=True)
    purpose: Mapped[str] = mapped_column(String(16), primary_key=True)
    calls: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0)


class UsageFlightRow(Base):
    """A turn running now under the caps, with the tokens it is expected to spend (usage/caps.py)."""

    __tablename__ = "usage_flights"
    __table_args__ = (Index("ix_usage_flights_created_at", "created_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    #: the speaker, ``<channel>:<user id>``
    user_id: Mapped[str] = mapped_column(String(255))
    #: the group chat, ``<channel>:group:<chat id>``, or "" for a private chat
    group_id: Mapped[str] = mapped_column(String(255))
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


# --- small values every process shares (issue 45) ------------------------------------------------------------
class SharedValueRow(Base):
    """A named value every process reads: a platform's access token (WeCom) with its expiry, the web chat's
    signing key. ``lease_until`` is set by the process refreshing the value, so only one does
    (store/shared_values.py)."""

    __tablename__ = "shared_values"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    value: Mapped[str] = mapped_column(Text, default="")
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


# --- knowledge base (issue 46) ---------------------------------------------------------------------------
class KnowledgeDocumentRow(Base):
    """One document of the knowledge base (DESIGN §1.7, §14): unique by scope and name."""

    __tablename__ = "knowledge_documents"
    __table_args__ = (UniqueConstraint("scope", "name", name="uq_knowledge_documents_scope_name"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    #: "global", a group's own scope ("<channel>-group-<chat id>") or a named scope
    scope: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    #: of the file's bytes: a file sent again unchanged is not indexed again
    sha256: Mapped[str] = mapped_column(String(64))
    #: "pdf", "docx", "md", "html" or "txt"
    kind: Mapped[str] = mapped_column(String(8))
    #: pages of a PDF; sections (headings) of the other kinds
    pages: Mapped[int] = mapped_column(Integer, default=0)
    chunks: Mapped[int] = mapped_column(Integer, default=0)
    #: "<channel>:<user id>", "console" or "folder"
    added_by: Mapped[str] = mapped_column(String(255))
    added_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class KnowledgeChunkRow(Base):
    """One passage of a document with its page (PDF) or section heading, and its int8 vector."""

    __tablename__ = "knowledge_chunks"
    __table_args__ = (Index("ix_knowledge_chunks_scope", "scope", "id"),
                      Index("ix_knowledge_chunks_document", "document_id", "seq"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    document_id: Mapped[int] = mapped_column(BigId, ForeignKey("knowledge_documents.id", ondelete="CASCADE"))
    #: the document's scope, repeated so a search reads the chunks of its scopes without a join
    scope: Mapped[str] = mapped_column(String(255))
    #: the chunk's place in its document
    seq: Mapped[int] = mapped_column(Integer)
    #: the PDF page (1-based); null for the other kinds
    page: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: the heading the chunk is under ("" when none)
    section: Mapped[str] = mapped_column(String(500), default="")
    text: Mapped[str] = mapped_column(Text)
    #: the embedding model's name ("" without a vector)
    model: Mapped[str] = mapped_column(String(255), default="")
    #: the int8 vector's scale (the float vector is ``vector * scale``); 0 without a vector
    scale: Mapped[float] = mapped_column(Float, default=0.0)
    vector: Mapped[bytes] = mapped_column(LargeBinary, default=b"")


class KnowledgeGrantRow(Base):
    """A named scope an admin let one chat search (``/kb use``)."""

    __tablename__ = "knowledge_grants"

    #: "<channel>:<chat id>"
    chat: Mapped[str] = mapped_column(String(255), primary_key=True)
    scope: Mapped[str] = mapped_column(String(255), primary_key=True)
    granted_by: Mapped[str] = mapped_column(String(255), default="")
    granted_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
