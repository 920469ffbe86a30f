"""Cutting a parsed document into passages: by page (PDF) and heading, with a small overlap.

A block (one page, or the text under one heading) is cut at paragraph ends into chunks of at most
:data:`CHUNK_CHARS`; a paragraph longer than that is cut at sentence ends. Each chunk after the first of a block
starts with the end of the one before it (up to :data:`OVERLAP_CHARS`, whole sentences), so a sentence cut by a
chunk boundary is still found whole. A chunk never spans two pages or two headings: its citation is exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from knowledge.parse import Block, Parsed
from memory.index import cut_at_sentences

#: The longest chunk, in characters: the local model's cost grows faster than a text's length (bench/knowledge.py),
#: and a short passage is a precise citation and a small share of the turn's budget.
CHUNK_CHARS = 800
#: Characters of the previous chunk repeated at the start of the next one.
OVERLAP_CHARS = 160
_SENTENCE_END = re.compile(r"(?<=[.!?。！？;；:])\s+|(?<=[。！？；])")


@dataclass(frozen=True, slots=True)
class Chunk:
    """A passage and where it is: the PDF page or the heading."""

    text: str
    page: int | None
    section: str

    def indexed_text(self) -> str:
        """What is searched and embedded: the heading before the text, so a heading's words find its passages."""
        return f"{self.section}\n{self.text}" if self.section else self.text


def _tail(text: str, limit: int) -> str:
    """The last whole sentences of ``text`` within ``limit`` characters ("" when even one is longer)."""
    if len(text) <= limit:
        return text
    window = text[-limit:]
    match = _SENTENCE_END.search(window)
    return window[match.end():].strip() if match else ""


def _sentences(paragraph: str, limit: int) -> list[str]:
    """A paragraph's sentences, each cut to ``limit`` characters."""
    parts = [p.strip() for p in _SENTENCE_END.split(paragraph) if p and p.strip()]
    return [piece for part in parts for piece in cut_at_sentences(part, limit, _SENTENCE_END)]


def chunk_block(block: Block, size: int = CHUNK_CHARS, overlap: int = OVERLAP_CHARS) -> list[Chunk]:
    """The chunks of one block: whole sentences packed up to ``size``, paragraphs kept apart by a line break."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", block.text) if p.strip()]
    chunks: list[str] = []
    current = ""
    for paragraph in paragraphs:
        for n, sentence in enumerate(_sentences(paragraph, size)):
            joint = " " if n else "\n"
            if current and len(current) + 1 + len(sentence) > size:
                chunks.append(current)
                carried = _tail(current.replace("\n", " "), overlap)
                fits = carried and len(carried) + 1 + len(sentence) <= size
                current = f"{carried} {sentence}" if fits else sentence
            else:
                current = f"{current}{joint}{sentence}" if current else sentence
    if current:
        chunks.append(current)
    return [Chunk(text=c, page=block.page, section=block.heading) for c in chunks]


def chunk(parsed: Parsed, size: int = CHUNK_CHARS, overlap: int = OVERLAP_CHARS) -> list[Chunk]:
    """The chunks of a document, in order."""
    return [c for block in parsed.blocks for c in chunk_block(block, size, overlap)]


def citation(name: str, page: int | None, section: str) -> str:
    """``[<document name>, p. <page>]`` for a page, ``[<document name>, § <heading>]`` for a section, else
    ``[<document name>]`` (text before a document's first heading)."""
    if page is not None:
        return f"[{name}, p. {page}]"
    if section:
        return f"[{name}, § {section}]"
    return f"[{name}]"
