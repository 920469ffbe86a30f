"""inbox.reply: the outbox (the final answer of a message, kept until the platform accepted it)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the nullable ``reply`` column to ``inbox``."""
    with op.batch_alter_table("inbox") as batch:
        batch.add_column(sa.Column("reply", sa.Text(), nullable=True))


def downgrade() -> None:
    """Drop ``inbox.reply``."""
    with op.batch_alter_table("inbox") as batch:
        batch.drop_column("reply")
