"""Tests for summaries/facts.py: the summary check keeps what users said, in English and Chinese."""

from __future__ import annotations

from pathlib import Path

import pytest

from summaries.facts import KEPT_LINE_CHARS, MAX_KEPT_LINES, check_summary, extract_facts, fold, with_kept_lines

ALICE = [
    "Hi! My name is Alice Moreau and I live in Lisbon.",
    "My cat is called Tom and he is 7 years old.",
    "My sister Clara arrives on 2026-12-03 at 14:30.",
    "Please remember my budget is 450 EUR for the trip. Mail me at alice@example.com or see "
    "https://example.com/trip, I'm @alice_m on Telegram.",
]


def values(texts: list[str]) -> list[str]:
    return [f.value for f in extract_facts(texts)]


def test_english_facts_in_order_of_appearance() -> None:
    assert values(ALICE) == ["Alice Moreau", "Lisbon", "Tom", "7", "Clara", "2026-12-03", "14:30", "450 EUR",
                             "alice@example.com", "https://example.com/trip", "@alice_m", "Telegram"]


def test_sentence_openers_are_not_names_unless_seen_inside_a_sentence() -> None:
    assert values(["Thanks a lot. Mail it tomorrow. Please call Bob."]) == ["Bob"]
    assert values(["Tom likes fish.", "I call him Tom."]) == ["Tom"]
    assert values(["Tom likes fish."]) == []


def test_dates_times_and_amounts_in_several_spellings() -> None:
    found = values(["We meet on 3 December 2026 at 2 pm, or Dec 5; it costs $1,200 or 30% of 4000 yen."])
    assert found == ["3 December 2026", "2 pm", "Dec 5", "$1,200", "30%", "4000 yen"]


def test_chinese_facts_names_places_quotes_numbers_and_recurring_words() -> None:
    texts = ["我叫王小明，住在杭州。我的猫叫“咪咪”，今年3岁。", "下周二下午3点在杭州开会，预算2000元。"]
    assert values(texts) == ["王小明", "杭州", "咪咪", "3", "下午3点", "2000元"]


def test_a_summary_that_lost_facts_gets_the_users_own_sentences_back() -> None:
    result = check_summary("- The user talked about a party.", ALICE)
    assert result.total == 12 and result.found == 0 and result.share == 0.0
    assert result.kept_lines == (
        "- (kept) My name is Alice Moreau and I live in Lisbon.",
        "- (kept) My cat is called Tom and he is 7 years old.",
        "- (kept) My sister Clara arrives on 2026-12-03 at 14:30.",
        "- (kept) Please remember my budget is 450 EUR for the trip.",
        "- (kept) Mail me at alice@example.com or see https://example.com/trip, I'm @alice_m on Telegram.",
    )


def test_a_faithful_summary_needs_no_kept_lines() -> None:
    summary = ("- Alice Moreau lives in Lisbon; her cat Tom is 7.\n- Her sister Clara arrives 2026-12-03 at 14:30.\n"
               "- Budget 450 EUR; contact alice@example.com, https://example.com/trip, @alice_m on Telegram.")
    result = check_summary(summary, ALICE)
    assert (result.total, result.found, result.kept_lines) == (12, 12, ())
    assert with_kept_lines(summary, result) == summary


def test_a_number_must_stand_alone_in_the_summary() -> None:
    result = check_summary("- Tom is 17 years old", ["My cat Tom is 7 years old."])
    assert result.found == 1 and result.total == 2
    assert result.kept_lines == ("- (kept) My cat Tom is 7 years old.",)


def test_an_invented_summary_in_chinese_keeps_the_user_lines() -> None:
    texts = ["我叫王小明，住在杭州。", "预算是2000元。"]
    result = check_summary("- 用户明天要去参加聚会", texts)
    assert result.found == 0
    assert with_kept_lines("- 用户明天要去参加聚会", result) == (
        "- 用户明天要去参加聚会\n- (kept) 我叫王小明，住在杭州。\n- (kept) 预算是2000元。")


def test_matching_folds_case_width_and_spaces() -> None:
    assert fold("ＡＬＩＣＥ\u3000 Moreau") == "alice moreau"
    assert check_summary("- alice   moreau", ["I am Alice Moreau."]).found == 1


def test_kept_lines_are_capped_in_length_and_number() -> None:
    long = "I think " + "really " * 100 + "that Zanzibar is lovely " + "truly " * 100
    (line,) = check_summary("", [long]).kept_lines
    assert "Zanzibar" in line and len(line) <= KEPT_LINE_CHARS + len("- (kept) ")
    many = [f"Item {i} costs {i * 10 + 1000} EUR." for i in range(MAX_KEPT_LINES + 10)]
    kept = check_summary("", many).kept_lines
    assert len(kept) == MAX_KEPT_LINES
    assert kept[-1] == f"- (kept) Item {MAX_KEPT_LINES + 9} costs {(MAX_KEPT_LINES + 9) * 10 + 1000} EUR."


def test_no_facts_means_a_full_share() -> None:
    result = check_summary("- chit-chat", ["hello there, how are you?"])
    assert (result.total, result.share, result.kept_lines) == (0, 1.0, ())


def test_a_name_inside_a_longer_word_is_not_found():
    user = ["I call my cat Tom. Tom is 7."]
    assert check_summary("- going out tomorrow, 17 guests", user).found == 0
    assert check_summary("- the cat Tom is 7", user).found == 2
    assert check_summary("- 猫叫豆豆", ["我的猫叫「豆豆」。"]).found == 1  # Chinese edges match anywhere


CORPUS = Path(__file__).with_name("fact_corpus.tsv")


def corpus() -> list[tuple[str, str, str]]:
    rows = [line.split("\t") for line in CORPUS.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]
    return [(label, lang, sentence) for label, lang, sentence in rows]


def test_the_labelled_corpus_is_large_and_balanced() -> None:
    rows = corpus()
    assert len(rows) >= 150
    for lang in ("en", "zh"):
        assert sum(1 for _, lg, _ in rows if lg == lang) >= 80
        assert sum(1 for lab, lg, _ in rows if lg == lang and lab == "none") >= 25


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_fact_recall_and_false_positives_on_the_labelled_corpus(lang: str) -> None:
    rows = [(label, sentence) for label, lg, sentence in corpus() if lg == lang]
    facts = [s for label, s in rows if label == "fact"]
    chat = [s for label, s in rows if label == "none"]
    missed = [s for s in facts if not extract_facts([s])]
    flagged = [s for s in chat if extract_facts([s])]
    assert len(missed) <= 0.05 * len(facts), missed
    assert len(flagged) <= 0.05 * len(chat), flagged


def test_statements_about_the_user_are_facts_whatever_their_case_or_length() -> None:
    texts = ["我住在杭州西湖区。", "我在阿里巴巴工作。", "i work as a nurse at the city hospital"]
    result = check_summary("- 用户聊了天气", texts)
    assert result.total == 3 and result.found == 0
    assert result.kept_lines == ("- (kept) 我住在杭州西湖区。", "- (kept) 我在阿里巴巴工作。",
                                 "- (kept) i work as a nurse at the city hospital")


def test_a_summary_that_says_the_statement_in_its_own_words_holds_it() -> None:
    texts = ["i work nights at a bakery downtown", "我住在杭州西湖区"]
    assert check_summary("- The user works night shifts at a downtown bakery\n- 用户住在杭州西湖区", texts).found == 2
    partial = check_summary("- The user works at night\n- 用户住在杭州", texts)
    assert partial.found == 0 and len(partial.kept_lines) == 2


def test_interjections_questions_and_requests_are_not_facts() -> None:
    assert values(["Wow Jon, same here!", "Nice one, Jon!", "Oh my god", "I think so too.", "I love it!"]) == []
    assert values(["Where do I live?", "我住在哪里？", "给我讲个笑话吧。", "哇，我也是！"]) == []
    assert values(["I live in Lisbon, do you?"]) == ["Lisbon"]
    assert values(["Yesterday Jon said he would call.", "i live near the old harbour, and you?"]) == [
        "Jon", "i live near the old harbour"]
