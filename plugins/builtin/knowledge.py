"""Built-in plugin: the knowledge base (DESIGN §1.4, §1.8, §14).

It makes this bot's :class:`~knowledge.base.KnowledgeBase` (``services.knowledge``), with the memory's embedder,
registers ``/kb`` and the ``knowledge_search`` tool, gives the agent the knowledge base's part of each turn (the
system prompt's section naming the scopes the chat may search, and with ``knowledge_auto`` the best passages), and
watches ``<data_dir>/knowledge/<scope>/``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from agent.tools.base import ToolContext, tool
from agent.turn import TurnExtras
from core.messages import IncomingMessage
from dispatcher.commands import CommandRequest
from knowledge.base import KnowledgeBase, Refused, format_hits, too_large
from knowledge.folder import KnowledgeFolder
from knowledge.scopes import GLOBAL, chat_key, is_group_scope, own_scope, valid_scope
from plugins.builtin.memory_index import searcher
from plugins.hookspecs import hookimpl

if TYPE_CHECKING:
    from agent.session import SessionState
    from dispatcher.commands import Services

logger = logging.getLogger(__name__)

USAGE = ("Usage: /kb lists this chat's documents; /kb add [scope] with a document (its caption, or a reply to it); "
         "/kb remove <name>; /kb use <scope>; /kb unuse <scope>.")
ADMINS_ONLY = "Sorry, /kb {what} is for admins."
NO_DOCUMENT = ("Send /kb add as the caption of a document (PDF, DOCX, Markdown, HTML or text), or as a reply to "
               "one.")
NO_FETCH = ("This chat cannot fetch files. Put the document in {folder} on the bot's machine, or upload it in the "
            "web console's Knowledge page.")
#: Documents named in the system prompt at most.
PROMPT_DOCUMENTS = 20
#: Passages ``knowledge_auto`` puts in a turn at most (fewer when the budget is short).
AUTO_PASSAGES = 3
_FOLDERS: dict[int, KnowledgeFolder] = {}


def knowledge_base(services: Services) -> KnowledgeBase:
    """This bot's knowledge base (made on first use), embedding with the memory's embedder."""
    found = services.knowledge
    if found is None:
        found = services.knowledge = KnowledgeBase(services.store, services.config,
                                                   lambda: searcher(services).index.embedder)
    return found


class TurnPart:
    """The knowledge base's part of a turn (``agent.turn.TurnKnowledge``)."""

    def __init__(self, services: Services) -> None:
        self.services = services

    async def for_turn(self, state: SessionState, text: str) -> TurnExtras:
        """The prompt section (only when the chat has documents) and, with ``knowledge_auto``, the best passages."""
        info = state.info
        if info is None:
            return TurnExtras()
        kb = knowledge_base(self.services)
        scopes, docs = await kb.chat_documents(info.channel, info.chat_id, info.is_group)
        if not docs:
            return TurnExtras()
        names = ", ".join(d.name for d in docs[:PROMPT_DOCUMENTS]) + (
            f" and {len(docs) - PROMPT_DOCUMENTS} more" if len(docs) > PROMPT_DOCUMENTS else "")
        prompt = ("# Knowledge base\n"
                  f"This chat may search the documents of these scopes: {', '.join(scopes)} ({len(docs)} "
                  f"documents: {names}). For questions they may answer, call knowledge_search, answer from the "
                  "passages, and cite each passage you use exactly as it is labelled, e.g. [manual.pdf, p. 12] or "
                  "[handbook.md, § Holidays]. Never cite a document or page you were not given.")
        passages: tuple[str, ...] = ()
        if self.services.config().knowledge_auto and text.strip():
            hits = await kb.search(scopes, text, AUTO_PASSAGES)
            passages = tuple(format_hits([h]) for h in hits)
        return TurnExtras(prompt=prompt, passages=passages)


@hookimpl
def register_commands(register) -> None:
    """Register /kb."""
    register("kb", kb_command, "this chat's documents; /kb add [scope], /kb remove <name>, /kb use|unuse <scope> "
                               "(admins)")


@hookimpl
def register_tools(register, services) -> None:
    """Register knowledge_search; give the agent the turn's part; start watching the knowledge folder."""
    register(knowledge_search)
    if services is None:
        return
    kb = knowledge_base(services)
    services.agent.knowledge = TurnPart(services)
    if id(services) in _FOLDERS:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    folder = _FOLDERS[id(services)] = KnowledgeFolder(kb, services.config().data_path() / "knowledge")
    folder.begin()  # its task exists before this returns: a stop at any time after stops it


@hookimpl
async def stopping(services) -> None:
    """Stop watching the knowledge folder."""
    folder = _FOLDERS.pop(id(services), None)
    if folder is not None:
        await folder.stop()


def folder_of(services: Services) -> KnowledgeFolder | None:
    """The folder watcher of these services, if it runs (tests)."""
    return _FOLDERS.get(id(services))


# --- /kb ------------------------------------------------------------------------------------------------
async def kb_command(request: CommandRequest) -> str:
    """``/kb``, ``/kb add [scope]``, ``/kb remove <name>``, ``/kb use <scope>``, ``/kb unuse <scope>``."""
    services = request.services
    assert services is not None
    kb = knowledge_base(services)
    words = request.command.args.strip().split(maxsplit=1)
    sub = words[0].lower() if words else ""
    rest = words[1].strip() if len(words) > 1 else ""
    msg = request.message
    if sub in ("", "list"):
        return await list_text(kb, msg)
    if sub not in ("add", "remove", "use", "unuse"):
        return USAGE
    if not request.is_admin:
        return ADMINS_ONLY.format(what=sub)
    if sub == "add":
        return await add_text(kb, request, rest)
    if sub == "remove":
        return await remove_text(kb, msg, rest)
    return await grant_text(kb, msg, sub, rest)


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _size(doc: Any) -> str:
    return _n(doc.pages, "page" if doc.kind == "pdf" else "section")


def _default_scope(msg: IncomingMessage) -> str:
    return own_scope(msg.channel, msg.chat_id, msg.is_group) or GLOBAL


async def list_text(kb: KnowledgeBase, msg: IncomingMessage) -> str:
    """The documents this chat can search."""
    scopes = await kb.scopes_for(msg.channel, msg.chat_id, msg.is_group)
    docs = await kb.documents(scopes)
    head = f"Scopes this chat searches: {', '.join(scopes)}."
    if not docs:
        return f"{head}\nNo documents yet. An admin adds one by sending it with the caption /kb add."
    lines = [head, f"{len(docs)} document{'s' if len(docs) != 1 else ''}:"]
    for d in docs:
        lines.append(f"- {d.name} ({d.scope}): {_size(d)}, {_n(d.chunks, 'chunk')}, added by {d.added_by}, "
                     f"{d.added_at:%Y-%m-%d %H:%M} UTC")
    return "\n".join(lines)


def _document_message(msg: IncomingMessage) -> IncomingMessage | None:
    """The message whose document to add: this one's, or the one it replies to."""
    if msg.extra.get("file_id") and msg.content_type == "document":
        return msg
    replied = msg.extra.get("reply_document")
    if isinstance(replied, dict) and replied.get("file_id"):
        return dataclasses.replace(msg, content_type="document", extra={**msg.extra, **replied})
    return None


async def add_text(kb: KnowledgeBase, request: CommandRequest, arg: str) -> str:
    """``/kb add [scope]`` with a document."""
    msg = request.message
    scope = arg.split()[0] if arg else _default_scope(msg)
    if not valid_scope(scope):
        return f"{scope!r} cannot name a scope: use letters, digits, '-', '_' and '.'."
    if is_group_scope(scope) and scope != own_scope(msg.channel, msg.chat_id, msg.is_group):
        return "Another group's own scope cannot be added to from here."
    source = _document_message(msg)
    if source is None:
        return NO_DOCUMENT
    name = str(source.extra.get("file_name") or "document")
    cfg = kb.config()
    declared = int(source.extra.get("file_size") or 0)
    reason = too_large(declared, cfg.knowledge_max_mb)  # refused by its declared size, before any download
    if reason:
        return f"{name} was not added: {reason}."
    channel = request.channel
    if channel is None or not channel.fetches_media:
        return NO_FETCH.format(folder=cfg.data_path() / "knowledge" / scope)
    try:
        data = await channel.download(source)
    except Exception as exc:  # noqa: BLE001 - the platform's refusal (too large to fetch, gone), said plainly
        logger.warning("knowledge: fetching %s failed: %s", name, exc)
        return (f"I could not fetch {name} ({exc}). A larger file can go in "
                f"{cfg.data_path() / 'knowledge' / scope} on the bot's machine, or through the web console.")
    if not data:
        return f"I could not fetch {name}; please send it again."
    try:
        added = await kb.add(scope, name, data, f"{msg.channel}:{msg.user_id}")
    except Refused as exc:
        return f"{exc}."
    doc = added.document
    if added.unchanged:
        return f"{doc.name} is already in {doc.scope}, unchanged ({_size(doc)}, {_n(doc.chunks, 'chunk')})."
    verb = "Replaced" if added.replaced else "Added"
    return f"{verb} {doc.name} in {doc.scope}: {_size(doc)}, {_n(doc.chunks, 'chunk')} indexed."


async def remove_text(kb: KnowledgeBase, msg: IncomingMessage, name: str) -> str:
    """``/kb remove <name>``: from the scopes this chat searches (``<scope>/<name>`` picks one)."""
    if not name:
        return "Usage: /kb remove <name> (as /kb lists it)."
    scopes = await kb.scopes_for(msg.channel, msg.chat_id, msg.is_group)
    wanted_scope = None
    if "/" in name and name.split("/", 1)[0] in scopes:
        wanted_scope, name = name.split("/", 1)
    docs = [d for d in await kb.documents(scopes) if d.name == name and wanted_scope in (None, d.scope)]
    if not docs:
        return f"No document named {name!r} in this chat's scopes ({', '.join(scopes)}); /kb lists them."
    if len(docs) > 1:
        return (f"{name} is in several scopes ({', '.join(d.scope for d in docs)}); say which, e.g. "
                f"/kb remove {docs[0].scope}/{name}.")
    doc = await kb.remove(docs[0].scope, docs[0].name)
    if doc is None:
        return f"{name} was removed meanwhile."
    return f"Removed {doc.name} from {doc.scope} ({_n(doc.chunks, 'chunk')})."


async def grant_text(kb: KnowledgeBase, msg: IncomingMessage, sub: str, scope: str) -> str:
    """``/kb use <scope>`` and ``/kb unuse <scope>``."""
    scope = scope.split()[0] if scope else ""
    if not scope:
        return f"Usage: /kb {sub} <scope>."
    if scope == GLOBAL or scope == own_scope(msg.channel, msg.chat_id, msg.is_group):
        return f"This chat always searches {scope}."
    if not valid_scope(scope) or is_group_scope(scope):
        return f"{scope!r} cannot be {'granted' if sub == 'use' else 'taken'} here: name a scope like 'handbook'."
    key = chat_key(msg.channel, msg.chat_id)
    if sub == "use":
        done = await kb.tables.grant(key, scope, f"{msg.channel}:{msg.user_id}")
        return f"This chat now searches {scope} too." if done else f"This chat already searches {scope}."
    done = await kb.tables.revoke(key, scope)
    return f"This chat no longer searches {scope}." if done else f"This chat did not search {scope}."


# --- the tool -------------------------------------------------------------------------------------------
def _kb_of(ctx: ToolContext) -> KnowledgeBase:
    services = ctx.services
    found = services.knowledge if services is not None else None
    if found is None:
        raise RuntimeError("knowledge_search needs the knowledge base in its context")
    return found


@tool
async def knowledge_search(ctx: ToolContext, query: str) -> str:
    """Search the documents this chat may use (manuals, handbooks, FAQs the admins added), by words and meaning.

    Returns up to 5 passages, best first, each starting with its citation ([document, p. page] or
    [document, § heading]); cite the ones you use exactly so.

    Args:
        query: what to look for, e.g. "warranty period for the battery" or "退货政策"
    """
    if not query.strip():
        return "Give a non-empty query to search the knowledge base."
    kb: KnowledgeBase = _kb_of(ctx)
    info = ctx.info
    if info is None:
        return "The knowledge base can only be searched while answering a chat."
    scopes = await kb.scopes_for(info.channel, info.chat_id, info.is_group)
    hits = await kb.search(scopes, query)
    if not hits:
        if not await kb.has_documents(scopes):
            return "This chat has no documents in its knowledge base."
        return f"No passage of this chat's documents matches {query.strip()!r}."
    return format_hits(hits)
