"""The Knowledge page (DESIGN §14): every document of the knowledge base by scope, a document's chunks, an upload
form and a remove button (both with the console's CSRF token).

An upload goes through the console's request cap (1 MB, as every form of the console: the body is read before the
session is checked); a larger document goes in ``<data_dir>/knowledge/<scope>/`` or through ``/kb add``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from console.server import console_of
from knowledge.base import Refused
from knowledge.chunk import citation
from knowledge.scopes import GLOBAL, valid_scope

if TYPE_CHECKING:
    from knowledge.base import KnowledgeBase

logger = logging.getLogger(__name__)

#: the largest upload the console takes (its request cap, less room for the form's other fields)
UPLOAD_MAX_BYTES = 1024 * 1024 - 16 * 1024


def add_routes(router: web.UrlDispatcher) -> None:
    """Register the Knowledge pages."""
    router.add_get("/knowledge", knowledge_list)
    router.add_get("/knowledge/document", document_page)
    router.add_post("/knowledge/upload", upload)
    router.add_post("/knowledge/remove", remove)


def _kb(request: web.Request) -> KnowledgeBase | None:
    return console_of(request).services.knowledge


def _off(request: web.Request) -> web.StreamResponse:
    return console_of(request).render(request, "message.html", title="Knowledge base",
                                      message="The knowledge base is off in this bot (its plugin is disabled).")


async def knowledge_list(request: web.Request, note: str = "", status: int = 200) -> web.StreamResponse:
    """Every document, by scope, with an upload form."""
    kb = _kb(request)
    if kb is None:
        return _off(request)
    console = console_of(request)
    docs = await kb.documents()
    cfg = console.services.config()
    return console.render(request, "knowledge.html", status=status, title="Knowledge base", docs=docs, note=note,
                          folder=str(cfg.data_path() / "knowledge"), upload_max=UPLOAD_MAX_BYTES // 1024,
                          max_mb=cfg.knowledge_max_mb)


async def document_page(request: web.Request) -> web.StreamResponse:
    """One document's chunks, each with its citation."""
    kb = _kb(request)
    if kb is None:
        return _off(request)
    try:
        doc_id = int(request.query.get("id", ""))
    except ValueError:
        raise web.HTTPNotFound(text="No such document.") from None
    doc = await kb.tables.get(doc_id)
    if doc is None:
        raise web.HTTPNotFound(text="No such document.")
    chunks = [{"cite": citation(doc.name, c.page, c.section), "text": c.text, "vector": bool(c.scale)}
              for c in await kb.tables.document_chunks(doc_id)]
    return console_of(request).render(request, "knowledge_document.html", title=doc.name, doc=doc, chunks=chunks)


async def upload(request: web.Request) -> web.StreamResponse:
    """Add an uploaded document to a scope."""
    kb = _kb(request)
    if kb is None:
        return _off(request)
    form = await request.post()
    scope = str(form.get("scope") or GLOBAL).strip() or GLOBAL
    field = form.get("file")
    if not valid_scope(scope):
        return await knowledge_list(request, f"{scope!r} cannot name a scope (letters, digits, '-', '_', '.').", 400)
    if not isinstance(field, web.FileField) or not field.filename:
        return await knowledge_list(request, "Choose a file to upload.", 400)
    data = field.file.read()
    try:
        added = await kb.add(scope, field.filename, data, "console")
    except Refused as exc:
        return await knowledge_list(request, f"{exc}. Nothing was changed.", 400)
    doc = added.document
    verb = "is already there, unchanged" if added.unchanged else "was indexed"
    return await knowledge_list(request, f"{doc.name} {verb} in {doc.scope}: {doc.pages} "
                                         f"{'pages' if doc.kind == 'pdf' else 'sections'}, {doc.chunks} chunks.")


async def remove(request: web.Request) -> web.StreamResponse:
    """Remove a document and its chunks."""
    kb = _kb(request)
    if kb is None:
        return _off(request)
    form = await request.post()
    try:
        doc = await kb.tables.get(int(str(form.get("id") or "")))
    except ValueError:
        doc = None
    if doc is None:
        return await knowledge_list(request, "That document is gone already.", 404)
    await kb.remove(doc.scope, doc.name)
    raise web.HTTPSeeOther("/knowledge")
