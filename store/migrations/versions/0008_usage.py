"""usage: one row per model call, for /usage, the caps and the console (DESIGN §1.7, §12); usage_daily: the
rows older than 400 days, summed per day (store/usage.py)

The sums are a table of their own rather than summed rows in ``usage``: the contract says a ``usage`` row
is one model call, and a reader counting calls or rows there must not meet a day's sum in disguise.

usage_flights: the turns running now under caps, with what each is expected to spend, so that processes
sharing a database see each other's turns in flight before their tokens are recorded (usage/caps.py).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 17:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types: a migration must not change when store/models.py does.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTCDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create usage with the indexes the caps' sums use (by speaker, by session, for the bot)."""
    op.create_table(
        "usage",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("purpose", sa.String(length=16), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cached_tokens", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_usage_created_at", "usage", ["created_at"])
    op.create_index("ix_usage_user_created", "usage", ["user_id", "created_at"])
    op.create_index("ix_usage_session_created", "usage", ["session_id", "created_at"])
    op.create_table(
        "usage_daily",
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("session_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("purpose", sa.String(length=16), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("day", "session_id", "user_id", "model", "purpose"),
    )


    op.create_table(
        "usage_flights",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("group_id", sa.String(length=255), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_usage_flights_created_at", "usage_flights", ["created_at"])


def downgrade() -> None:
    """Drop usage, usage_daily and usage_flights."""
    op.drop_index("ix_usage_flights_created_at", table_name="usage_flights")
    op.drop_table("usage_flights")
    op.drop_table("usage_daily")
    op.drop_index("ix_usage_session_created", table_name="usage")
    op.drop_index("ix_usage_user_created", table_name="usage")
    op.drop_index("ix_usage_created_at", table_name="usage")
    op.drop_table("usage")
