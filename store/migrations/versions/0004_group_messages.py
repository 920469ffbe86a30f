"""group_messages: what was said in a group without asking the bot (its background), kept per group

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types: a migration must not change when store/models.py does.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTCDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create group_messages with its per-group and retention indexes."""
    op.create_table(
        "group_messages",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("chat_id", sa.String(length=255), nullable=False),
        sa.Column("user_name", sa.String(length=255), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("sent_at", UTCDateTime, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_group_messages_chat", "group_messages", ["channel", "chat_id", "created_at"])
    op.create_index("ix_group_messages_created_at", "group_messages", ["created_at"])


def downgrade() -> None:
    """Drop group_messages."""
    op.drop_index("ix_group_messages_created_at", table_name="group_messages")
    op.drop_index("ix_group_messages_chat", table_name="group_messages")
    op.drop_table("group_messages")
