"""Reply splitting of the weixin channel (channels/weixin/text.py): 4,000 characters, at natural breaks."""

from __future__ import annotations

from channels.weixin.text import MESSAGE_LIMIT, split_text


def test_the_limit_is_the_apis_4000_characters():
    assert MESSAGE_LIMIT == 4000
    assert split_text("a" * 4000) == ["a" * 4000]
    assert split_text("a" * 4001) == ["a" * 4000, "a"]


def test_splits_at_a_paragraph_break_in_the_second_half():
    text = "x" * 2500 + "\n\n" + "y" * 1000 + "\n" + "z" * 1000
    assert split_text(text) == ["x" * 2500, "y" * 1000 + "\n" + "z" * 1000]


def test_a_break_in_the_first_half_is_not_used_then_a_line_then_a_space():
    text = "a" * 100 + "\n\n" + "b" * 2500 + "\n" + "c" * 2000
    assert split_text(text) == ["a" * 100 + "\n\n" + "b" * 2500, "c" * 2000]
    words = ("word " * 1000).strip()  # 4,999 characters
    pieces = split_text(words)
    assert [len(p) for p in pieces] == [3999, 999] and " ".join(pieces) == words


def test_ten_thousand_characters_keep_every_word_in_order():
    text = "\n".join(f"line {i} " + "x" * 40 for i in range(220))  # about 10,500 characters
    pieces = split_text(text)
    assert len(pieces) == 3 and all(len(p) <= 4000 for p in pieces)
    assert "\n".join(pieces) == text


def test_blank_pieces_are_not_sent():
    assert split_text("") == []
    assert split_text("\n\n\n") == []


def test_take_piece_gives_one_piece_and_the_rest_after_it():
    from channels.weixin.text import take_piece

    text = "a" * 2500 + "\n\n" + "b" * 2000
    assert take_piece(text) == ("a" * 2500, "b" * 2000)
    assert take_piece("short") == ("short", "")
    assert take_piece("\n\n \n") == ("", "")
    piece, rest = take_piece("x" * 1000 + " " + "y" * 1500, 1200)  # at the space, which is dropped
    assert (piece, rest) == ("x" * 1000, "y" * 1500)
    assert take_piece("z" * 1500, 1200) == ("z" * 1200, "z" * 300)  # no break at all: cut hard
