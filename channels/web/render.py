"""The model's Markdown as safe HTML: markdown-it-py with raw HTML off, so nothing a model or a visitor writes
is ever executed in the page (a ``<script>`` is shown as text; ``javascript:`` links are not made links)."""

from __future__ import annotations

from markdown_it import MarkdownIt

#: CommonMark plus tables and strikethrough; ``html`` off: raw HTML is escaped, never passed through
_MD = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True}).enable(["table", "strikethrough"])


def render_markdown(text: str) -> str:
    """``text`` (Markdown) as HTML that carries no markup of its own: raw tags come out escaped."""
    return _MD.render(text or "")
