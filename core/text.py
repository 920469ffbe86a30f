"""Text made valid at the edge: what no stored or sent text may carry."""

from __future__ import annotations

import re

#: What no text may carry past the edge: lone UTF-16 surrogates (they cannot be encoded, so every later
#: request with them fails) and NUL (PostgreSQL text and its JSON operators refuse it).
_INVALID = re.compile("[\x00\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` made valid: lone surrogates become U+FFFD, NUL characters are dropped."""
    if not _INVALID.search(text):
        return text
    return _INVALID.sub(lambda m: "" if m.group() == "\x00" else "\ufffd", text)
