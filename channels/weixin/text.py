"""Reply splitting for the weixin channel: WeChat's bot API takes at most 4,000 characters per text message."""

from __future__ import annotations

#: the longest text one ``sendmessage`` carries (the limit Tencent's own plugin splits at, ``textChunkLimit``)
MESSAGE_LIMIT = 4000


def take_piece(text: str, limit: int = MESSAGE_LIMIT) -> tuple[str, str]:
    """The first message of ``text`` (at most ``limit`` characters) and the rest after it: cut at a paragraph
    break in the second half of the piece, else at a line break, else at a space, else hard. Only the line
    breaks and spaces it was cut at are dropped; ("", "") when nothing but blanks is left."""
    rest = text.strip("\n")
    if len(rest) <= limit:
        return (rest, "") if rest.strip() else ("", "")
    window = rest[:limit]
    for sep in ("\n\n", "\n", " "):
        at = window.rfind(sep)
        if at >= limit // 2:
            piece, rest = window[:at].rstrip(), rest[at:].lstrip("\n ")
            break
    else:
        piece, rest = window, rest[limit:]
    if not piece.strip():
        return take_piece(rest, limit)
    return piece, rest if rest.strip() else ""


def split_text(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Split ``text`` into messages of at most ``limit`` characters, each whole (see :func:`take_piece`).

    Nothing is dropped or repeated but the line breaks and spaces a piece was cut at.
    """
    pieces: list[str] = []
    piece, rest = take_piece(text, limit)
    while piece:
        pieces.append(piece)
        piece, rest = take_piece(rest, limit)
    return pieces
