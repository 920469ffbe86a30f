"""memory_chunks: the semantic memory index (passages of memory files and their embeddings)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
# Chained to 0001 on this branch; the merge re-chains it after 0002 (the full-text index revision).
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types: a migration must not change when store/models.py does.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTCDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create memory_chunks and its per-session index."""
    op.create_table(
        "memory_chunks",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=255), nullable=False),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("dim", sa.Integer(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_memory_chunks_session_id", "memory_chunks", ["session_id", "id"])


def downgrade() -> None:
    """Drop memory_chunks."""
    op.drop_index("ix_memory_chunks_session_id", table_name="memory_chunks")
    op.drop_table("memory_chunks")
