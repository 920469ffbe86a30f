"""The knowledge base's tables (DESIGN §1.7, §14): ``knowledge_documents``, ``knowledge_chunks`` and the chats'
grants of named scopes (``knowledge_grants``).

A document is unique by ``(scope, name)``. Storing one replaces the document of that name in one transaction:
its old chunks go with it (the foreign key cascades; they are also deleted explicitly), so a search never sees
half of a document, and every process reads the same index. Chunks carry their document's scope, so a search
loads the chunks of its scopes without a join. Vectors are int8 with one float scale a row, as
``message_vectors`` keeps them.

All functions here are transaction functions: ``store.run(fn, ...)``; :class:`KnowledgeStore` wraps them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, delete, func, insert, or_, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from store.models import KnowledgeChunkRow, KnowledgeDocumentRow, KnowledgeGrantRow, utcnow

if TYPE_CHECKING:
    from store.store import Store

_D = KnowledgeDocumentRow.__table__
_C = KnowledgeChunkRow.__table__
_G = KnowledgeGrantRow.__table__


@dataclass(frozen=True, slots=True)
class Document:
    """One row of ``knowledge_documents``."""

    id: int
    scope: str
    name: str
    sha256: str
    kind: str
    pages: int
    chunks: int
    added_by: str
    added_at: datetime


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """One stored chunk, as a search or a page reads it."""

    id: int
    document: str
    kind: str
    seq: int
    page: int | None
    section: str
    text: str
    model: str
    scale: float
    vector: bytes


@dataclass(frozen=True, slots=True)
class NewChunk:
    """A chunk to store: where it is in the document, its text and its int8 vector (``b""``: none)."""

    page: int | None
    section: str
    text: str
    model: str = ""
    scale: float = 0.0
    vector: bytes = b""


_DOC_COLUMNS = (_D.c.id, _D.c.scope, _D.c.name, _D.c.sha256, _D.c.kind, _D.c.pages, _D.c.chunks, _D.c.added_by,
                _D.c.added_at)
# Every turn reads these two (the knowledge base's part of a turn): built once, so SQLAlchemy neither builds the
# statement nor computes its cache key again per call.
_ANY_DOCUMENT = select(_D.c.id).limit(1)
_GRANTS = select(_G.c.scope).where(_G.c.chat == bindparam("chat")).order_by(_G.c.scope)
_CHAT_DOCUMENTS = (select(*_DOC_COLUMNS)
                   .where(or_(_D.c.scope.in_(bindparam("scopes", expanding=True)),
                              _D.c.scope.in_(select(_G.c.scope).where(_G.c.chat == bindparam("chat")))))
                   .order_by(_D.c.scope, _D.c.name))


# --- transaction functions -------------------------------------------------------------------------------
def find(conn: Connection, scope: str, name: str) -> Document | None:
    """The document ``name`` of ``scope``, or None."""
    row = conn.execute(select(*_DOC_COLUMNS).where(_D.c.scope == scope, _D.c.name == name)).first()
    return Document(*row) if row is not None else None


def documents(conn: Connection, scopes: list[str]) -> list[Document]:
    """The documents of these scopes, by scope then name."""
    if not scopes:
        return []
    rows = conn.execute(select(*_DOC_COLUMNS).where(_D.c.scope.in_(scopes)).order_by(_D.c.scope, _D.c.name))
    return [Document(*row) for row in rows]


def all_documents(conn: Connection) -> list[Document]:
    """Every document, by scope then name."""
    return [Document(*row) for row in conn.execute(select(*_DOC_COLUMNS).order_by(_D.c.scope, _D.c.name))]


def get(conn: Connection, document_id: int) -> Document | None:
    """A document by id, or None."""
    row = conn.execute(select(*_DOC_COLUMNS).where(_D.c.id == document_id)).first()
    return Document(*row) if row is not None else None


def replace(conn: Connection, scope: str, name: str, sha256: str, kind: str, pages: int, added_by: str,
            chunks: list[NewChunk]) -> Document:
    """Store a document and its chunks, replacing the document of that name in that scope (and its chunks)."""
    old = conn.execute(select(_D.c.id).where(_D.c.scope == scope, _D.c.name == name)).scalar()
    if old is not None:
        conn.execute(delete(_C).where(_C.c.document_id == old))
        conn.execute(delete(_D).where(_D.c.id == old))
    doc_id = conn.execute(insert(_D).returning(_D.c.id), {
        "scope": scope, "name": name, "sha256": sha256, "kind": kind, "pages": pages, "chunks": len(chunks),
        "added_by": added_by, "added_at": utcnow()}).scalar_one()
    rows = [{"document_id": doc_id, "scope": scope, "seq": i, "page": c.page, "section": c.section[:500],
             "text": c.text, "model": c.model, "scale": float(c.scale), "vector": c.vector}
            for i, c in enumerate(chunks)]
    for start in range(0, len(rows), 500):
        conn.execute(insert(_C), rows[start:start + 500])
    found = get(conn, doc_id)
    assert found is not None
    return found


def remove(conn: Connection, scope: str, name: str) -> Document | None:
    """Delete a document and its chunks; return what was deleted, or None when there was none."""
    doc = find(conn, scope, name)
    if doc is None:
        return None
    conn.execute(delete(_C).where(_C.c.document_id == doc.id))
    conn.execute(delete(_D).where(_D.c.id == doc.id))
    return doc


def stamp(conn: Connection, scopes: list[str]) -> tuple[int, int, str]:
    """A version of these scopes' documents: it changes whenever one is stored, replaced or removed."""
    if not scopes:
        return 0, 0, ""
    count, total, newest = conn.execute(select(func.count(), func.sum(_D.c.id), func.max(_D.c.added_at))
                                        .where(_D.c.scope.in_(scopes))).one()
    return int(count or 0), int(total or 0), str(newest or "")


def load_chunks(conn: Connection, scopes: list[str]) -> list[ChunkRow]:
    """Every chunk of these scopes, with its document's name and kind, in document order."""
    if not scopes:
        return []
    rows = conn.execute(select(_C.c.id, _D.c.name, _D.c.kind, _C.c.seq, _C.c.page, _C.c.section, _C.c.text,
                               _C.c.model, _C.c.scale, _C.c.vector)
                        .select_from(_C.join(_D, _D.c.id == _C.c.document_id))
                        .where(_C.c.scope.in_(scopes)).order_by(_C.c.id))
    return [ChunkRow(*row[:9], bytes(row[9] or b"")) for row in rows]


def document_chunks(conn: Connection, document_id: int) -> list[ChunkRow]:
    """One document's chunks, in order."""
    rows = conn.execute(select(_C.c.id, _D.c.name, _D.c.kind, _C.c.seq, _C.c.page, _C.c.section, _C.c.text,
                               _C.c.model, _C.c.scale, _C.c.vector)
                        .select_from(_C.join(_D, _D.c.id == _C.c.document_id))
                        .where(_C.c.document_id == document_id).order_by(_C.c.seq))
    return [ChunkRow(*row[:9], bytes(row[9] or b"")) for row in rows]


def grants(conn: Connection, chat: str) -> list[str]:
    """The named scopes granted to a chat (``<channel>:<chat id>``), sorted."""
    return list(conn.execute(_GRANTS, {"chat": chat}).scalars())


def any_document(conn: Connection) -> bool:
    """Whether any scope holds a document."""
    return conn.execute(_ANY_DOCUMENT).first() is not None


def chat_documents(conn: Connection, chat: str, scopes: list[str]) -> tuple[list[str], list[Document]]:
    """The documents of ``scopes`` and of the scopes granted to ``chat``, by scope then name, with those grants.

    One statement when there is no such document (a bot without a knowledge base asks this every turn); the
    grants are read only when there is one, else ``[]`` comes back for them.
    """
    docs = [Document(*row) for row in conn.execute(_CHAT_DOCUMENTS, {"scopes": scopes, "chat": chat})]
    if not docs:
        return [], []
    return grants(conn, chat), docs


def grant(conn: Connection, chat: str, scope: str, by: str) -> bool:
    """Let a chat search a named scope; False when it could already."""
    if conn.execute(select(_G.c.scope).where(_G.c.chat == chat, _G.c.scope == scope)).first() is not None:
        return False
    conn.execute(insert(_G), {"chat": chat, "scope": scope, "granted_by": by, "granted_at": utcnow()})
    return True


def revoke(conn: Connection, chat: str, scope: str) -> bool:
    """Take a named scope from a chat; False when it did not have it."""
    return bool(conn.execute(delete(_G).where(_G.c.chat == chat, _G.c.scope == scope)).rowcount)


class KnowledgeStore:
    """The knowledge tables through the conversation store's engine (one transaction per call)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def find(self, scope: str, name: str) -> Document | None:
        """The document ``name`` of ``scope``, or None."""
        return await self.store.run(find, scope, name)

    async def get(self, document_id: int) -> Document | None:
        """A document by id."""
        return await self.store.run(get, document_id)

    async def documents(self, scopes: list[str] | None = None) -> list[Document]:
        """The documents of ``scopes`` (None: all)."""
        if scopes is None:
            return await self.store.run(all_documents)
        return await self.store.run(documents, list(scopes))

    async def replace(self, scope: str, name: str, sha256: str, kind: str, pages: int, added_by: str,
                      chunks: list[NewChunk]) -> Document:
        """Store a document, replacing one of the same name in the scope; a concurrent store of the same
        document by another process is retried once (it then replaces that one)."""
        try:
            return await self.store.run(replace, scope, name, sha256, kind, pages, added_by, chunks)
        except IntegrityError:
            return await self.store.run(replace, scope, name, sha256, kind, pages, added_by, chunks)

    async def remove(self, scope: str, name: str) -> Document | None:
        """Delete a document; None when there was none."""
        return await self.store.run(remove, scope, name)

    async def stamp(self, scopes: list[str]) -> tuple[int, int, str]:
        """A version of these scopes' documents."""
        return await self.store.run(stamp, list(scopes))

    async def load_chunks(self, scopes: list[str]) -> list[ChunkRow]:
        """Every chunk of these scopes."""
        return await self.store.run_long(load_chunks, list(scopes))

    async def document_chunks(self, document_id: int) -> list[ChunkRow]:
        """One document's chunks."""
        return await self.store.run(document_chunks, document_id)

    async def grants(self, chat: str) -> list[str]:
        """The named scopes granted to a chat."""
        return await self.store.run(grants, chat)

    async def any_document(self) -> bool:
        """Whether any scope holds a document."""
        return await self.store.run(any_document)

    async def chat_documents(self, chat: str, scopes: list[str]) -> tuple[list[str], list[Document]]:
        """A chat's grants and the documents of ``scopes`` and of those grants, in one transaction."""
        return await self.store.run(chat_documents, chat, list(scopes))

    async def grant(self, chat: str, scope: str, by: str) -> bool:
        """Let a chat search a named scope."""
        try:
            return await self.store.run(grant, chat, scope, by)
        except IntegrityError:  # granted at the same moment by another process
            return False

    async def revoke(self, chat: str, scope: str) -> bool:
        """Take a named scope from a chat."""
        return await self.store.run(revoke, chat, scope)


__all__: list[Any] = ["ChunkRow", "Document", "KnowledgeStore", "NewChunk"]
