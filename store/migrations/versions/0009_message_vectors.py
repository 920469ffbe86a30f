"""message_vectors: the embedding of every stored user and assistant message, for history_search (issue 34)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 17:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types: a migration must not change when store/models.py does.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Create message_vectors, deleted with its message, and its per-session index."""
    op.create_table(
        "message_vectors",
        sa.Column("message_id", BigId, autoincrement=False, nullable=False),
        sa.Column("session_id", sa.String(length=255), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("scale", sa.Float(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["message_id"], ["messages.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("message_id"),
    )
    op.create_index("ix_message_vectors_session", "message_vectors", ["session_id", "message_id"])


def downgrade() -> None:
    """Drop message_vectors."""
    op.drop_index("ix_message_vectors_session", table_name="message_vectors")
    op.drop_table("message_vectors")
