"""history search by whole words and relevance: FTS5 (bm25) on SQLite, a tsvector (ts_rank) on PostgreSQL

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 15:00:00

The trigram index of 0002 matched substrings ("her" inside "others") and could not rank. Now:

* SQLite: ``message_search`` becomes an FTS5 table with the ``unicode61`` tokenizer over the message's text
  with CJK characters spaced apart (the ``chatbot_index_text`` function, which the store registers on every
  connection: store/search_terms.py), so a query's words match whole words and its Chinese matches as
  character phrases; ``bm25`` ranks. ``message_search_vocab`` (fts5vocab) counts the messages holding each
  word, so that a search can leave out words too common to rank by.
* PostgreSQL: ``message_search`` keeps its text and gains a generated ``terms`` tsvector (the ``simple``
  configuration over the same spacing, done in SQL) with a GIN index; ``ts_rank`` ranks. The pg_trgm index
  of 0002 is dropped: nothing searches with ILIKE any more.

The triggers still write a message's entry in the transaction that stores it and delete it with the
message; the messages already there are indexed anew.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Frozen copies (a migration must not change when the code does): 0002's text of a message ``m``.
SQLITE_TEXT = """trim(CASE json_type(m.content, '$.content')
    WHEN 'text' THEN json_extract(m.content, '$.content')
    WHEN 'array' THEN (SELECT group_concat(json_extract(value, '$.text'), char(10))
                       FROM json_each(m.content, '$.content') WHERE json_type(value, '$.text') = 'text')
  END, ' ' || char(9, 10, 13))"""
ROLES = "m.role IN ('user', 'assistant')"
CJK_CLASS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
POSTGRES_TERMS = (f"to_tsvector('simple'::regconfig, regexp_replace(text, '([{CJK_CLASS}])', ' \\1 ', 'g'))")


def upgrade() -> None:
    """Replace the trigram index by a word index, and fill it from the stored messages."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS message_search_insert")
        op.execute("DROP TRIGGER IF EXISTS message_search_delete")
        op.execute("DROP TABLE IF EXISTS message_search")
        op.execute("CREATE VIRTUAL TABLE message_search USING fts5(text, tokenize='unicode61 remove_diacritics 2')")
        op.execute(f"""CREATE TRIGGER message_search_insert AFTER INSERT ON messages
            WHEN new.role IN ('user', 'assistant') BEGIN
            INSERT INTO message_search (rowid, text)
            SELECT id, chatbot_index_text(t) FROM (SELECT new.id AS id, {SQLITE_TEXT.replace("m.", "new.")} AS t)
            WHERE t <> '';
            END""")
        op.execute("CREATE TRIGGER message_search_delete AFTER DELETE ON messages "
                   "BEGIN DELETE FROM message_search WHERE rowid = old.id; END")
        # how many messages hold each word: a search leaves out words too common to rank by
        op.execute("CREATE VIRTUAL TABLE message_search_vocab USING fts5vocab(message_search, 'row')")
        op.execute(f"INSERT INTO message_search (rowid, text) SELECT id, chatbot_index_text(t) FROM "
                   f"(SELECT m.id AS id, {SQLITE_TEXT} AS t FROM messages m WHERE {ROLES}) WHERE t <> ''")
        return
    op.execute("DROP INDEX IF EXISTS ix_message_search_trgm")
    op.execute(f"ALTER TABLE message_search ADD COLUMN terms tsvector GENERATED ALWAYS AS ({POSTGRES_TERMS}) STORED")
    op.execute("CREATE INDEX ix_message_search_terms ON message_search USING gin (terms)")


def downgrade() -> None:
    """Back to 0002's index: on SQLite the trigram table is filled again; on PostgreSQL the column goes."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE IF EXISTS message_search_vocab")
        op.execute("DROP TRIGGER IF EXISTS message_search_insert")
        op.execute("DROP TRIGGER IF EXISTS message_search_delete")
        op.execute("DROP TABLE IF EXISTS message_search")
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
    op.execute("DROP INDEX IF EXISTS ix_message_search_terms")
    op.execute("ALTER TABLE message_search DROP COLUMN terms")
