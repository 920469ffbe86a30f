"""Reply splitting for the weixin channel: WeChat's bot API takes at most 4,000 characters per text message."""

from __future__ import annotations

#: the longest text one ``sendmessage`` carries (the limit Tencent's own plugin splits at)
MESSAGE_LIMIT = 4000


def split_text(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Split ``text`` into messages of at most ``limit`` characters, each whole: at a paragraph break where
    one is in the second half of a piece, else at a line break, else at a space, else hard.

    Nothing is dropped or repeated but the line breaks and spaces a piece was cut at.
    """
    pieces: list[str] = []
    rest = text.strip("\n")
    while len(rest) > limit:
        window = rest[:limit]
        cut = -1
        for sep in ("\n\n", "\n", " "):
            at = window.rfind(sep)
            if at >= limit // 2:
                cut = at
                break
        if cut < 0:
            pieces.append(window)
            rest = rest[limit:]
            continue
        pieces.append(window[:cut].rstrip())
        rest = rest[cut:].lstrip("\n ")
    if rest.strip():
        pieces.append(rest)
    return [piece for piece in pieces if piece.strip()]
