"""Tests for summaries/quotes.py: a summary line never quotes the user saying what they did not say."""

from __future__ import annotations

from summaries.quotes import drop_invented_quotes, quotation, said_by_user

USER = ["I'm going to the market on Saturday, then home.", "我下周去杭州出差。"]


def test_speaker_labels_and_saying_verbs_are_quotations() -> None:
    assert quotation("User: I'm going to the beach.") == "I'm going to the beach."
    assert quotation("- **User**: hello") == "hello"
    assert quotation("用户：我明天去北京") == "我明天去北京"
    assert quotation('- The user said "I will pay on Friday" to the bank') == "I will pay on Friday"
    assert quotation("- 用户说：“我不喜欢猫”") == "我不喜欢猫"
    assert quotation("- The user plans a trip to the market") is None
    assert quotation("- Assistant: sure") is None


def test_a_quotation_is_held_by_the_users_words_allowing_small_changes() -> None:
    assert said_by_user("I am going to the market on Saturday", USER)
    assert said_by_user("我下周去杭州出差", USER)
    assert not said_by_user("I'm going to the beach.", USER)
    assert not said_by_user("我明天去北京", USER)


def test_invented_quotes_are_dropped_and_the_rest_stays() -> None:
    summary = ("- The user plans a trip to the market\n"
               "User: I'm going to the beach.\n"
               '- The user said "I am going to the market on Saturday"\n'
               "- 用户说：“我明天去北京”\n"
               "- 用户下周去杭州")
    kept, dropped = drop_invented_quotes(summary, USER)
    assert dropped == 2
    assert kept == ("- The user plans a trip to the market\n"
                    '- The user said "I am going to the market on Saturday"\n'
                    "- 用户下周去杭州")
    assert drop_invented_quotes("- nothing quoted", []) == ("- nothing quoted", 0)
