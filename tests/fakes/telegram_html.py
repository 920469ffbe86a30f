"""Telegram's HTML parse mode, as strictly as the Bot API checks it, for the fake Bot API server."""

from __future__ import annotations

import html
import re

#: Tags the Bot API accepts with ``parse_mode=HTML``.
ALLOWED_TAGS = frozenset({
    "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a", "code", "pre",
    "blockquote", "tg-emoji",
})
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[a-zA-Z-]+\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s>]+))*)\s*>")
_ENTITY = re.compile(r"&(?:lt|gt|amp|quot|#[0-9]+|#x[0-9a-fA-F]+);")


class HTMLParseError(ValueError):
    """The text is not valid Telegram HTML; the message reads like the Bot API's description."""


def parse_telegram_html(text: str) -> str:
    """Validate Telegram HTML and return the visible text; raise :class:`HTMLParseError` when invalid."""
    out: list[str] = []
    stack: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "<":
            m = _TAG.match(text, i)
            if m is None:
                raise HTMLParseError(f"can't parse entities: Unexpected \"<\" at byte offset {_offset(text, i)}")
            closing, name = m.group(1), m.group(2).lower()
            if name not in ALLOWED_TAGS:
                kind = "end" if closing else "start"
                raise HTMLParseError(
                    f"can't parse entities: Unsupported {kind} tag \"{name}\" at byte offset {_offset(text, i)}")
            if closing:
                if not stack or stack[-1] != name:
                    raise HTMLParseError(
                        f"can't parse entities: Unmatched end tag at byte offset {_offset(text, i)}, "
                        f"expected \"</{stack[-1] if stack else ''}>\", found \"</{name}>\"")
                stack.pop()
            else:
                stack.append(name)
            i = m.end()
        elif ch == "&":
            m = _ENTITY.match(text, i)
            if m is None:
                raise HTMLParseError(
                    f"can't parse entities: Unsupported HTML entity at byte offset {_offset(text, i)}")
            out.append(html.unescape(m.group(0)))
            i = m.end()
        elif ch == ">":
            raise HTMLParseError(f"can't parse entities: Unexpected \">\" at byte offset {_offset(text, i)}")
        else:
            out.append(ch)
            i += 1
    if stack:
        raise HTMLParseError(f"can't parse entities: Can't find end tag corresponding to start tag \"{stack[-1]}\"")
    return "".join(out)


def _offset(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8"))
