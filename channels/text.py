"""Reply splitting shared by the channels whose messages have a plain length limit (weixin, feishu, dingtalk).

A long answer is cut where a reader expects a break: at a paragraph break in the second half of a piece, else
at a line break, else at a space, else hard at the limit. Nothing is dropped or repeated but the line breaks and
spaces a piece was cut at. (Telegram counts UTF-16 units and renders HTML, so it keeps its own splitter.)
"""

from __future__ import annotations


def cut_point(text: str, limit: int) -> tuple[int, int]:
    """Where the first piece of ``text`` ends when ``text`` is longer than ``limit``: ``(end, next_start)``,
    the piece being ``text[:end]`` and the rest ``text[next_start:]`` (the break between them left out)."""
    window = text[:limit]
    for sep in ("\n\n", "\n", " "):
        at = window.rfind(sep)
        if at >= limit // 2:
            end = len(window[:at].rstrip())
            rest = at
            while rest < len(text) and text[rest] in "\n ":
                rest += 1
            return end, rest
    return limit, limit


def take_piece(text: str, limit: int = 4000) -> tuple[str, str]:
    """The first message of ``text`` (at most ``limit`` characters) and the rest after it, cut as
    :func:`split_text` cuts; ("", "") when nothing but blanks is left. A channel that sends piece by piece (and
    may have to shorten one the platform refused) takes them one at a time with it."""
    rest = text.strip("\n")
    while True:
        if len(rest) <= limit:
            return (rest, "") if rest.strip() else ("", "")
        end, start = cut_point(rest, limit)
        piece, rest = rest[:end], rest[start:]
        if piece.strip():
            return piece, rest if rest.strip() else ""


def split_text(text: str, limit: int = 4000) -> list[str]:
    """Split ``text`` into messages of at most ``limit`` characters, each whole (see the module docstring)."""
    pieces: list[str] = []
    rest = text.strip("\n")
    while len(rest) > limit:
        end, start = cut_point(rest, limit)
        pieces.append(rest[:end])
        rest = rest[start:]
    if rest.strip():
        pieces.append(rest)
    return [piece for piece in pieces if piece.strip()]
