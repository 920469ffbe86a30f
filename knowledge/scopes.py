"""Scopes (DESIGN §14): ``global`` (every chat), a group's own (``<channel>-group-<chat id>``), and named scopes
an admin grants to chats (``/kb use``). A chat searches ``global``, its own scope (groups) and its grants, never
another scope."""

from __future__ import annotations

import re

GLOBAL = "global"
#: A scope's name: it is also a folder name under ``<data_dir>/knowledge/``.
_VALID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def own_scope(channel: str, chat_id: str, is_group: bool) -> str | None:
    """A group's own scope; None for a private chat (its documents go to ``global``)."""
    if not is_group:
        return None
    return f"{channel}-group-{chat_id}"


def chat_key(channel: str, chat_id: str) -> str:
    """The key of a chat's grants."""
    return f"{channel}:{chat_id}"


def valid_scope(name: str) -> bool:
    """Whether ``name`` can name a scope (and its folder)."""
    return bool(_VALID.fullmatch(name)) and name not in (".", "..")


def is_group_scope(name: str) -> bool:
    """Whether ``name`` is some group's own scope (it cannot be granted to another chat)."""
    return "-group-" in name


def chat_scopes(channel: str, chat_id: str, is_group: bool, granted: list[str]) -> list[str]:
    """The scopes a chat may search, ``global`` first."""
    scopes = [GLOBAL]
    own = own_scope(channel, chat_id, is_group)
    if own is not None:
        scopes.append(own)
    scopes.extend(s for s in granted if s not in scopes and not is_group_scope(s))
    return scopes
