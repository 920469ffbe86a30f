"""reminders: messages the bot sends at a set time in the chat they were set in (DESIGN §1.7, §12)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 17:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types: a migration must not change when store/models.py does.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTCDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create reminders with the index the scheduler's due query uses."""
    op.create_table(
        "reminders",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=255), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=False),
        sa.Column("due_at", UTCDateTime, nullable=False),
        sa.Column("every", sa.String(length=64), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("sent_at", UTCDateTime, nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        # where it fires: the message that set it (channel, chat, thread, WeChat's context token), as JSON
        sa.Column("target", sa.JSON(), nullable=True),
        # true when it was sent late (it fell due while no process was running)
        sa.Column("late", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_reminders_status_due", "reminders", ["status", "due_at"])
    op.create_index("ix_reminders_session_id", "reminders", ["session_id"])


def downgrade() -> None:
    """Drop reminders."""
    op.drop_index("ix_reminders_session_id", table_name="reminders")
    op.drop_index("ix_reminders_status_due", table_name="reminders")
    op.drop_table("reminders")
