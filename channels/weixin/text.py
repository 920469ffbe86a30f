"""Reply splitting for the weixin channel: WeChat's bot API takes at most 4,000 characters per text message."""

from __future__ import annotations

from channels.text import split_text, take_piece

#: the longest text one ``sendmessage`` carries (the limit Tencent's own plugin splits at)
MESSAGE_LIMIT = 4000

__all__ = ["MESSAGE_LIMIT", "split_text", "take_piece"]
