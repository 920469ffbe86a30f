"""history search: a full-text index of user and assistant text, per message

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 05:00:00

SQLite: an FTS5 table with the trigram tokenizer (any language, Chinese included), keyed by the message's
id. PostgreSQL: a table of the same text with a pg_trgm GIN index for ``ILIKE`` when the extension can
be created (it ships with Debian's postgresql package; without it, searches scan one session's rows).
On both, triggers on ``messages`` write a message's entry in the transaction that stores it and delete it
with the message; the indexed text is the message's text content (a string, or the text parts of a
list) for user and assistant messages only. This migration indexes the messages already there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

logger = logging.getLogger(__name__)

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

#: The indexed text of a row of ``messages`` named ``m`` (SQLite), or NULL.
SQLITE_TEXT = """trim(CASE json_type(m.content, '$.content')
    WHEN 'text' THEN json_extract(m.content, '$.content')
    WHEN 'array' THEN (SELECT group_concat(json_extract(value, '$.text'), char(10))
                       FROM json_each(m.content, '$.content') WHERE json_type(value, '$.text') = 'text')
  END, ' ' || char(9, 10, 13))"""
#: The same for PostgreSQL (``content`` is ``json``).
POSTGRES_TEXT = """btrim(CASE json_typeof(m.content -> 'content')
    WHEN 'string' THEN m.content ->> 'content'
    WHEN 'array' THEN (SELECT string_agg(p ->> 'text', E'\\n') FROM json_array_elements(m.content -> 'content') p
                       WHERE json_typeof(p -> 'text') = 'string')
  END, E' \\t\\n\\r')"""
ROLES = "m.role IN ('user', 'assistant')"


def upgrade() -> None:
    """Create the index and its triggers, and fill it from the stored messages."""
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        op.execute("CREATE VIRTUAL TABLE message_search USING fts5(text, tokenize='trigram')")
        op.execute(f"""CREATE TRIGGER message_search_insert AFTER INSERT ON messages
            WHEN new.role IN ('user', 'assistant') BEGIN
            INSERT INTO message_search (rowid, text)
            SELECT id, t FROM (SELECT new.id AS id, {SQLITE_TEXT.replace("m.", "new.")} AS t) WHERE t <> '';
            END""")
        op.execute("CREATE TRIGGER message_search_delete AFTER DELETE ON messages "
                   "BEGIN DELETE FROM message_search WHERE rowid = old.id; END")
        op.execute(f"INSERT INTO message_search (rowid, text) SELECT id, t FROM "
                   f"(SELECT m.id AS id, {SQLITE_TEXT} AS t FROM messages m WHERE {ROLES}) WHERE t <> ''")
        return
    op.create_table(
        "message_search",
        sa.Column("message_id", BigId, sa.ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("text", sa.Text(), nullable=False),
    )
    _trigram_index(bind)
    op.execute(f"""CREATE FUNCTION message_search_insert() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE t text;
        BEGIN
          IF NEW.role IN ('user', 'assistant') THEN
            SELECT {POSTGRES_TEXT} INTO t FROM (SELECT NEW.content AS content) m;
            IF t <> '' THEN
              INSERT INTO message_search (message_id, text) VALUES (NEW.id, t);
            END IF;
          END IF;
          RETURN NULL;
        END $$""")
    op.execute("CREATE TRIGGER message_search_insert AFTER INSERT ON messages "
               "FOR EACH ROW EXECUTE FUNCTION message_search_insert()")
    op.execute(f"INSERT INTO message_search (message_id, text) SELECT id, t FROM "
               f"(SELECT m.id AS id, {POSTGRES_TEXT} AS t FROM messages m WHERE {ROLES}) x WHERE t <> ''")
def _trigram_index(bind: sa.engine.Connection) -> None:
    """A pg_trgm index for ILIKE, or none (searches still work) when the extension cannot be created."""
    try:
        with bind.begin_nested():
            bind.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
            schema = bind.execute(sa.text("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                                          "ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'")).scalar_one()
            bind.execute(sa.text(f'CREATE INDEX ix_message_search_trgm ON message_search '
                                 f'USING gin (text "{schema}".gin_trgm_ops)'))
    except sa.exc.DBAPIError as exc:
        logger.warning("pg_trgm is not available (%s): history search scans each session's rows instead",
                       exc.orig.__class__.__name__)


def downgrade() -> None:
    """Drop the index and its triggers (the extension stays: other tables may use it)."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS message_search_insert")
        op.execute("DROP TRIGGER IF EXISTS message_search_delete")
    else:
        op.execute("DROP TRIGGER IF EXISTS message_search_insert ON messages")
        op.execute("DROP FUNCTION IF EXISTS message_search_insert()")
    op.execute("DROP TABLE IF EXISTS message_search")
