"""The model's Markdown, rendered as the HTML subset Telegram accepts (``parse_mode=HTML``).

Bold, italic, strikethrough, inline code, fenced code (``<pre><code class="language-x">``), links and
quotes map to Telegram tags. Headings become bold lines, lists get "•" or "1." markers, tables stay as
preformatted source. Everything else is text, with ``<``, ``>`` and ``&`` escaped, so raw HTML from the
model can never break the markup.
"""

from __future__ import annotations

import html
import logging
import re

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

logger = logging.getLogger(__name__)

_MD = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])
_SAFE_SCHEMES = ("http://", "https://", "tg://", "mailto:")
_INLINE_TAGS = {"strong": "b", "em": "i", "s": "s"}
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
#: One line that Markdown leaves as it is and that needs no escaping: no inline markup character, no
#: HTML or entity, not a heading, quote or list item, no leading or trailing blank (a short "Sure!").
_PLAIN = re.compile(r"[^\s\x00\d#>+\-=\\`*_~\[\]<&|](?:[^\n\r\x00\\`*_~\[\]<>&|]*[^\s\x00\\`*_~\[\]<>&|])?")


def escape(text: str) -> str:
    """Escape ``<``, ``>`` and ``&`` for Telegram HTML text."""
    return html.escape(text, quote=False)


def markdown_to_html(text: str) -> str:
    """Render Markdown as Telegram HTML."""
    if _PLAIN.fullmatch(text):  # most short replies: the parser would give them back unchanged
        return text
    lines = text.splitlines()
    root = SyntaxTreeNode(_MD.parse(text))
    return _Renderer(lines).blocks(root.children, "\n\n").strip("\n")


class _Renderer:
    """Walks markdown-it's syntax tree and writes Telegram HTML."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def blocks(self, nodes: list[SyntaxTreeNode], sep: str) -> str:
        return sep.join(part for part in (self.block(n) for n in nodes) if part)

    def block(self, node: SyntaxTreeNode) -> str:
        kind = node.type
        if kind in ("paragraph", "inline"):
            return self.inline(node)
        if kind == "heading":
            return f"<b>{self.inline(node)}</b>"
        if kind in ("fence", "code_block"):
            code = escape(node.content.rstrip("\n"))
            lang = (node.info or "").strip().split(" ")[0] if kind == "fence" else ""
            if lang and re.fullmatch(r"[\w+#.-]+", lang):
                return f'<pre><code class="language-{escape(lang)}">{code}</code></pre>'
            return f"<pre>{code}</pre>" if code else ""
        if kind == "blockquote":
            return f"<blockquote>{self.blocks(node.children, chr(10))}</blockquote>"
        if kind in ("bullet_list", "ordered_list"):
            return self.list(node)
        if kind == "hr":
            return "——————"
        if kind == "table":
            start, end = node.map or (0, 0)
            return f"<pre>{escape(chr(10).join(self.lines[start:end]))}</pre>"
        if kind == "html_block":
            return escape(node.content.rstrip("\n"))
        return self.blocks(node.children, "\n")

    def list(self, node: SyntaxTreeNode) -> str:
        out: list[str] = []
        number = int(node.attrs.get("start", 1) or 1)
        for item in node.children:
            marker = f"{number}. " if node.type == "ordered_list" else "• "
            number += 1
            body = self.blocks(item.children, "\n")
            pad = " " * len(marker)
            out.append(marker + body.replace("\n", "\n" + pad))
        return "\n".join(out)

    def inline(self, node: SyntaxTreeNode) -> str:
        return "".join(self.span(child) for child in node.children)

    def span(self, node: SyntaxTreeNode) -> str:
        kind = node.type
        if kind == "text":
            return escape(node.content)
        if kind in ("softbreak", "hardbreak"):
            return "\n"
        if kind == "code_inline":
            return f"<code>{escape(node.content)}</code>"
        if kind in _INLINE_TAGS:
            tag = _INLINE_TAGS[kind]
            return f"<{tag}>{self.inline(node)}</{tag}>"
        if kind == "link":
            href = str(node.attrs.get("href", ""))
            label = self.inline(node)
            if href.lower().startswith(_SAFE_SCHEMES):
                return f'<a href="{html.escape(href, quote=True)}">{label or escape(href)}</a>'
            return label
        if kind == "image":
            src = str(node.attrs.get("src", ""))
            alt = escape(node.content or "image")
            if src.lower().startswith(("http://", "https://")):
                return f'<a href="{html.escape(src, quote=True)}">{alt}</a>'
            return alt
        if kind == "html_inline":
            return escape(node.content)
        if node.children:
            return self.inline(node)
        return escape(node.content)


def balance_fence(chunk: str, opener: str = "") -> tuple[str, str]:
    """Reopen a code fence left open by the previous chunk and close one left open at the end.

    ``opener`` is the fence line the previous chunk left open (or ""). Returns the source to render and
    the fence line this chunk leaves open.
    """
    source = (opener + "\n" + chunk) if opener else chunk
    fence, fence_line = "", ""
    for line in source.splitlines():
        m = _FENCE.match(line)
        if not m:
            continue
        if not fence:
            fence, fence_line = m.group(1), line.strip()
        elif m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
            fence = ""
    if fence:
        return source.rstrip("\n") + "\n" + fence, fence_line
    return source, ""


def balance_fences(chunks: list[str]) -> list[str]:
    """:func:`balance_fence` over consecutive chunks of one text."""
    out: list[str] = []
    opener = ""
    for chunk in chunks:
        source, opener = balance_fence(chunk, opener)
        out.append(source)
    return out


__all__ = ["markdown_to_html", "escape", "balance_fence", "balance_fences"]
