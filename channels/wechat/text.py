"""Pure text helpers of the WeChat channel: reply splitting, @mention stripping, the terminal QR code."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

import pyqrcode

logger = logging.getLogger(__name__)

#: WeChat's web client accepts long texts, but about 2,000 characters per message reads well and is safe.
MESSAGE_LIMIT = 2000
#: WeChat puts this narrow space (U+2005) after an @name in groups.
AT_SEPARATOR = "\u2005"
#: The web login page the QR code encodes.
QR_LOGIN_URL = "https://login.weixin.qq.com/l/"


def split_text(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Split ``text`` into messages of at most ``limit`` characters, on line boundaries where possible.

    Each piece of text is copied once, so a long reply costs time in proportion to its length.
    """
    if len(text) <= limit:
        return [text]
    chunks: list[str] = []
    parts: list[str] = []  # the message being filled
    size = 0
    for line in text.splitlines(keepends=True):
        if len(line) > limit:  # a single over-long line: cut it hard
            if parts:
                chunks.append("".join(parts))
                parts, size = [], 0
            whole = len(line) - len(line) % limit if len(line) % limit else len(line) - limit
            chunks.extend(line[i:i + limit] for i in range(0, whole, limit))
            line = line[whole:]
        if parts and size + len(line) > limit:
            chunks.append("".join(parts))
            parts, size = [], 0
        parts.append(line)
        size += len(line)
    if parts:
        chunks.append("".join(parts))
    out = [chunk.rstrip("\n") for chunk in chunks]
    return [chunk for chunk in out if chunk.strip()]


def strip_mentions(text: str, names: Iterable[str]) -> str:
    """Remove ``@name`` followed by U+2005, a space or the end of the text, for each of the bot's names."""
    unique = sorted({name for name in names if name}, key=len, reverse=True)
    for name in unique:
        pattern = re.escape("@" + name) + r"(?:\u2005| |$)"
        text = re.sub(pattern, "", text)
    return text.strip()


def render_qr(url: str) -> str:
    """The QR code of ``url`` as text for a dark terminal: light modules drawn with half blocks."""
    rows = [row for row in pyqrcode.create(url).text(quiet_zone=2).splitlines() if row]
    if len(rows) % 2:
        rows.append("0" * len(rows[0]))
    lines = []
    for top, bottom in zip(rows[0::2], rows[1::2], strict=True):
        chars = []
        for t, b in zip(top, bottom, strict=True):
            light_top, light_bottom = t == "0", b == "0"
            chars.append("█" if light_top and light_bottom else "▀" if light_top else "▄" if light_bottom else " ")
        lines.append("".join(chars))
    return "\n".join(lines) + "\n"
