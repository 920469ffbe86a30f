"""initial schema: sessions, messages, inbox, summary_jobs, admin_grants

Revision ID: 0001
Revises:
Create Date: 2026-11-22 05:42:33
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types: a migration must not change when store/models.py does.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTCDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create every table of the initial schema."""
    op.create_table(
        "sessions",
        sa.Column("session_id", sa.String(length=255), nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("chat_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("is_group", sa.Boolean(), nullable=False),
        sa.Column("title", sa.String(length=255), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("last_active", UTCDateTime, nullable=False),
        sa.Column("context_start_seq", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("summary_turns", sa.Integer(), nullable=False),
        sa.Column("summarized_through_seq", sa.Integer(), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("session_id"),
    )
    op.create_index("ix_sessions_last_active", "sessions", ["last_active"])

    op.create_table(
        "messages",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=255), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.session_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("session_id", "seq", name="uq_messages_session_seq"),
    )

    op.create_table(
        "inbox",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("message_id", sa.String(length=255), nullable=False),
        sa.Column("session_id", sa.String(length=255), nullable=False),
        sa.Column("user_seq", sa.Integer(), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("channel", "message_id", name="uq_inbox_channel_message"),
    )
    op.create_index("ix_inbox_created_at", "inbox", ["created_at"])
    op.create_index("ix_inbox_session_id", "inbox", ["session_id"])
    op.create_index("ix_inbox_status", "inbox", ["status"])

    op.create_table(
        "summary_jobs",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=255), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.Column("from_seq", sa.Integer(), nullable=False),
        sa.Column("through_seq", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_summary_jobs_session_id", "summary_jobs", ["session_id"])
    op.create_index("ix_summary_jobs_status", "summary_jobs", ["status"])

    op.create_table(
        "admin_grants",
        sa.Column("user_key", sa.String(length=255), nullable=False),
        sa.Column("granted_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("user_key"),
    )


def downgrade() -> None:
    """Drop every table of the initial schema."""
    op.drop_table("admin_grants")
    op.drop_index("ix_summary_jobs_status", table_name="summary_jobs")
    op.drop_index("ix_summary_jobs_session_id", table_name="summary_jobs")
    op.drop_table("summary_jobs")
    op.drop_index("ix_inbox_status", table_name="inbox")
    op.drop_index("ix_inbox_session_id", table_name="inbox")
    op.drop_index("ix_inbox_created_at", table_name="inbox")
    op.drop_table("inbox")
    op.drop_table("messages")
    op.drop_index("ix_sessions_last_active", table_name="sessions")
    op.drop_table("sessions")
