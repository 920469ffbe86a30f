"""Reading documents into blocks of text with their page (PDF) or heading (the others), DESIGN §14.

- PDF: ``pypdf`` (pure Python, no model, no native code), page by page; an encrypted file that does not open
  with the empty password, a file that is not a PDF, or one without a text layer (scanned pages) is refused
  with a clear reason (:class:`Unreadable`).
- DOCX: ``python-docx``: paragraphs under their headings (the ``Heading n`` and ``Title`` styles), and tables
  row by row.
- Markdown: ``markdown-it-py``'s tokens find the headings (ATX and setext, not ``#`` lines inside code), and the
  source lines between them are the sections.
- HTML: ``beautifulsoup4``: the text under each ``h1``-``h6``, scripts, styles and navigation left out.
- Plain text: read as Markdown (a text file with ``#`` headings gets its sections; one without is one section).

Every parser works on bytes in memory and runs off the event loop (the caller's thread); nothing is downloaded.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import PurePath

#: The kinds of documents read, by file suffix.
SUFFIXES: dict[str, str] = {
    ".pdf": "pdf", ".docx": "docx", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html",
    ".txt": "txt", ".text": "txt", ".rst": "txt",
}
#: Text a "page" of a document without pages holds, for the page cap.
CHARS_PER_PAGE = 3000


class Unreadable(Exception):
    """The document cannot be read; the message says why, for the person who sent it."""


@dataclass(frozen=True, slots=True)
class Block:
    """A run of a document's text on one page (PDF) or under one heading (the others)."""

    text: str
    page: int | None = None
    heading: str = ""


@dataclass(slots=True)
class Parsed:
    """A document as text: its kind, its pages (PDF) or sections, and its blocks in order."""

    kind: str
    pages: int
    blocks: list[Block] = field(default_factory=list)

    @property
    def chars(self) -> int:
        """Characters of text in all."""
        return sum(len(b.text) for b in self.blocks)


def kind_of(name: str) -> str | None:
    """The kind of a document by its file name, or None when it is not one this reads."""
    return SUFFIXES.get(PurePath(name).suffix.lower())


def sniff(data: bytes, name: str) -> str | None:
    """The kind of a document: by its name, else by its first bytes (a PDF or a DOCX sent without a suffix)."""
    found = kind_of(name)
    if found is not None:
        return found
    if data[:5] == b"%PDF-":
        return "pdf"
    if data[:2] == b"PK" and b"word/" in data[:4096]:
        return "docx"
    return None


def parse(data: bytes, name: str, *, max_pages: int = 0) -> Parsed:
    """Read a document; raise :class:`Unreadable` with the reason when it cannot be read, has no text, or has
    more than ``max_pages`` pages (0: no cap)."""
    kind = sniff(data, name)
    if kind is None:
        allowed = ", ".join(sorted({s for s in SUFFIXES if s not in (".text", ".markdown", ".htm")}))
        raise Unreadable(f"{name} is not a kind of document I read (I read {allowed})")
    if kind == "pdf":
        parsed = parse_pdf(data, max_pages=max_pages)
    elif kind == "docx":
        parsed = parse_docx(data)
    elif kind == "html":
        parsed = parse_html(_decode(data))
    else:
        parsed = parse_markdown(_decode(data), kind=kind)
    if kind != "pdf" and max_pages and parsed.chars > max_pages * CHARS_PER_PAGE:
        raise Unreadable(f"it is about {parsed.chars // CHARS_PER_PAGE:,} pages long; the knowledge base takes at "
                         f"most {max_pages:,} (knowledge_max_pages)")
    if not any(b.text.strip() for b in parsed.blocks):
        if kind == "pdf":
            raise Unreadable("it has no text I can read (scanned pages are images; a PDF with a text layer is "
                             "needed, e.g. after OCR)")
        raise Unreadable("it has no text")
    return parsed


def _decode(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    for encoding in ("utf-8", "utf-16"):
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        if "\0" not in text:
            return text
    if b"\0" in data[:4096]:
        raise Unreadable("it is not a text file (binary data)")
    return data.decode("latin-1")


# --- PDF ------------------------------------------------------------------------------------------------
def parse_pdf(data: bytes, *, max_pages: int = 0) -> Parsed:
    """Each page's text, numbered from 1."""
    import logging

    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    # pypdf warns through logging on every oddity of a damaged file: one clear note is given instead
    quiet = logging.getLogger("pypdf")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        try:
            reader = PdfReader(io.BytesIO(data), strict=False)
            if reader.is_encrypted:
                try:
                    opened = reader.decrypt("")
                except Exception as exc:  # noqa: BLE001 - e.g. an AES file without the crypto package
                    raise Unreadable("it is encrypted (password-protected); send a copy without a password") from exc
                if not opened:
                    raise Unreadable("it is encrypted (password-protected); send a copy without a password")
            count = len(reader.pages)
        except Unreadable:
            raise
        except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError,
                RecursionError) as exc:
            raise Unreadable(f"it is not a readable PDF ({type(exc).__name__}: {str(exc)[:120]})") from exc
        if max_pages and count > max_pages:
            raise Unreadable(f"it has {count:,} pages; the knowledge base takes at most {max_pages:,} "
                             "(knowledge_max_pages)")
        blocks = []
        for number in range(count):
            try:
                text = reader.pages[number].extract_text() or ""
            except Exception:  # noqa: BLE001 - one damaged page is left out, not the document
                text = ""
            text = _clean(text)
            if text:
                blocks.append(Block(text=text, page=number + 1))
        return Parsed(kind="pdf", pages=count, blocks=blocks)
    finally:
        quiet.setLevel(level)


_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_BLANKS = re.compile(r"\n{3,}")


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\0", "")
    text = "\n".join(_SPACES.sub(" ", line).strip() for line in text.split("\n"))
    return _BLANKS.sub("\n\n", text).strip()


# --- DOCX -----------------------------------------------------------------------------------------------
def parse_docx(data: bytes) -> Parsed:
    """Paragraphs and tables under their headings."""
    try:
        from docx import Document
        from docx.table import Table
        from docx.text.paragraph import Paragraph

        doc = Document(io.BytesIO(data))
        items = list(doc.iter_inner_content())
    except Exception as exc:  # noqa: BLE001 - python-docx raises many kinds on a damaged file
        raise Unreadable(f"it is not a readable DOCX file ({type(exc).__name__})") from exc
    blocks: list[Block] = []
    heading, lines = "", []

    def close() -> None:
        text = _clean("\n\n".join(lines))
        if text:
            blocks.append(Block(text=text, heading=heading))
        lines.clear()

    sections = 0
    for item in items:
        if isinstance(item, Paragraph):
            style = (item.style.name if item.style is not None else "") or ""
            text = item.text.strip()
            if text and (style.startswith("Heading") or style == "Title"):
                close()
                heading = text
                sections += 1
            elif text:
                lines.append(text)
        elif isinstance(item, Table):
            for row in item.rows:
                cells = list(dict.fromkeys(c.text.strip() for c in row.cells if c.text.strip()))
                if cells:
                    lines.append(" | ".join(cells))
    close()
    return Parsed(kind="docx", pages=max(sections, 1), blocks=blocks)


# --- Markdown and text ----------------------------------------------------------------------------------
def parse_markdown(text: str, *, kind: str = "md") -> Parsed:
    """The source lines between headings, each section under its heading."""
    from markdown_it import MarkdownIt

    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    tokens = MarkdownIt("commonmark").parse(text)
    headings: list[tuple[int, int, str]] = []  # (first line, end line, heading text)
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.map is not None and i + 1 < len(tokens):
            headings.append((token.map[0], token.map[1], tokens[i + 1].content.strip()))
    blocks: list[Block] = []
    starts = [(0, 0, "")] + headings
    for n, (_first, end, title) in enumerate(starts):
        stop = headings[n][0] if n < len(headings) else len(lines)
        body = _clean("\n".join(lines[end:stop]))
        if body:
            blocks.append(Block(text=body, heading=title))
    return Parsed(kind=kind, pages=max(len(headings), 1), blocks=blocks)


# --- HTML -----------------------------------------------------------------------------------------------
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_SKIP = {"script", "style", "noscript", "template", "nav", "svg", "head"}
_BLOCK_TAGS = {"p", "div", "li", "tr", "br", "pre", "blockquote", "section", "article", "dd", "dt", "table",
               "ul", "ol", "td", "th", "header", "footer", "main", "figcaption"}


def parse_html(text: str) -> Parsed:
    """The text under each heading (the page's title names what comes before the first)."""
    from bs4 import BeautifulSoup, NavigableString, Tag

    soup = BeautifulSoup(text, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title is not None else ""
    for tag in soup.find_all(_SKIP):
        tag.decompose()
    blocks: list[Block] = []
    heading, parts = title, []
    sections = 0

    def close() -> None:
        body = _clean("".join(parts))
        if body:
            blocks.append(Block(text=body, heading=heading))
        parts.clear()

    def walk(node: Tag) -> None:
        nonlocal heading, sections
        for child in node.children:
            if isinstance(child, NavigableString):
                if type(child) is NavigableString:  # not a comment, CDATA or doctype
                    parts.append(str(child))
            elif isinstance(child, Tag):
                if child.name in _HEADINGS:
                    close()
                    heading = child.get_text(" ", strip=True)
                    sections += 1
                    continue
                if child.name in _BLOCK_TAGS:
                    parts.append("\n")
                walk(child)
                if child.name in _BLOCK_TAGS:
                    parts.append("\n")

    walk(soup.body if soup.body is not None else soup)
    close()
    return Parsed(kind="html", pages=max(sections, 1), blocks=blocks)
