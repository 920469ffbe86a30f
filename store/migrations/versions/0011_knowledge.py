"""knowledge_documents, knowledge_chunks, knowledge_grants: the knowledge base (issue 46)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28 14:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types: a migration must not change when store/models.py does.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTCDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create the three tables and their indexes."""
    op.create_table(
        "knowledge_documents",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("scope", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("pages", sa.Integer(), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("added_by", sa.String(length=255), nullable=False),
        sa.Column("added_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("scope", "name", name="uq_knowledge_documents_scope_name"),
    )
    op.create_table(
        "knowledge_chunks",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("document_id", BigId, nullable=False),
        sa.Column("scope", sa.String(length=255), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("page", sa.Integer(), nullable=True),
        sa.Column("section", sa.String(length=500), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("scale", sa.Float(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["document_id"], ["knowledge_documents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_knowledge_chunks_scope", "knowledge_chunks", ["scope", "id"])
    op.create_index("ix_knowledge_chunks_document", "knowledge_chunks", ["document_id", "seq"])
    op.create_table(
        "knowledge_grants",
        sa.Column("chat", sa.String(length=255), nullable=False),
        sa.Column("scope", sa.String(length=255), nullable=False),
        sa.Column("granted_by", sa.String(length=255), nullable=False),
        sa.Column("granted_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("chat", "scope"),
    )


def downgrade() -> None:
    """Drop the knowledge base's tables."""
    op.drop_table("knowledge_grants")
    op.drop_index("ix_knowledge_chunks_document", table_name="knowledge_chunks")
    op.drop_index("ix_knowledge_chunks_scope", table_name="knowledge_chunks")
    op.drop_table("knowledge_chunks")
    op.drop_table("knowledge_documents")
