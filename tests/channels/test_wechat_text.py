"""Tests of channels/wechat/text.py: splitting, @mention stripping, the terminal QR code."""

from __future__ import annotations

import pyqrcode

from channels.wechat.text import AT_SEPARATOR, MESSAGE_LIMIT, render_qr, split_text, strip_mentions


def test_short_text_is_one_message() -> None:
    assert split_text("hello\nworld") == ["hello\nworld"]
    assert MESSAGE_LIMIT == 2000


def test_long_text_splits_on_line_boundaries() -> None:
    lines = [f"{i:04d}" + "x" * 96 for i in range(50)]  # 50 lines of 100 characters (+ newline)
    chunks = split_text("\n".join(lines), 2000)
    # 19 lines take 1,919 characters with their newlines; a 20th would make 2,020
    assert [len(c) for c in chunks] == [1918, 1918, 12 * 101 - 1]
    assert chunks[0].split("\n") == lines[:19]
    assert chunks[1].split("\n") == lines[19:38]
    assert chunks[2].split("\n") == lines[38:]


def test_over_long_line_is_cut_hard() -> None:
    chunks = split_text("a" * 4500 + "\nend", 2000)
    assert chunks == ["a" * 2000, "a" * 2000, "a" * 500 + "\nend"]


def test_strip_mentions_leading_embedded_and_trailing() -> None:
    names = ["Helper", "Botty"]
    assert strip_mentions(f"@Helper{AT_SEPARATOR}what time is it", names) == "what time is it"
    assert strip_mentions(f"hey @Botty{AT_SEPARATOR}what time", names) == "hey what time"
    assert strip_mentions("@Helper how are you", names) == "how are you"
    assert strip_mentions("thanks @Helper", names) == "thanks"
    # another member whose name merely starts with the bot's stays
    assert strip_mentions(f"@Helpers{AT_SEPARATOR}hi", names) == f"@Helpers{AT_SEPARATOR}hi"
    assert strip_mentions("mail me@Helper.com", names) == "mail me@Helper.com"


def test_render_qr_is_square_blocks() -> None:
    text = render_qr("https://login.weixin.qq.com/l/abc")
    lines = text.rstrip("\n").split("\n")
    width = len(lines[0])
    assert all(len(line) == width for line in lines)
    assert set("".join(lines)) <= {"█", "▀", "▄", " "}
    # this URL needs a 33-module code (version 4, level H); plus 2 x 2 quiet zone = 37, two rows per line
    assert len(pyqrcode.create("https://login.weixin.qq.com/l/abc").code) == 33
    assert width == 37 and len(lines) == 19


def test_a_megabyte_splits_at_exact_boundaries():
    lines = ("a" * 99 + "\n") * 10_000  # 20 lines fill 2,000 characters; the line ends are dropped
    chunks = split_text(lines)
    hard = split_text("x" * 1_000_001)
    assert chunks == ["\n".join(["a" * 99] * 20)] * 500
    assert [len(c) for c in hard] == [2000] * 500 + [1]
