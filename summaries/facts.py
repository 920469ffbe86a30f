"""The summary check (DESIGN §3): the concrete facts of what users said must survive summarisation.

A model that summarises badly must not make the bot forget. So, deterministically and without a model,
the dropped user texts are searched for concrete facts: URLs, e-mail addresses, @handles, dates and times,
amounts and other numbers, names and other proper nouns, quoted terms, and in Chinese (which has no
capitals) quoted terms, numbers and names after cue words ("我叫…", "住在…"), and words that recur. Each
fact the summary does not contain comes back as a verbatim ``- (kept) …`` line of the user's own words
(the sentence that holds it), so it stays in memory and in the injected summary.

The match is literal after folding case, width and spacing: a summary that says "December 3" for
"2026-12-03" loses the check and the user's sentence is kept as well. Keeping a line too many costs a
few tokens; losing a fact breaks the product's promise.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from summaries.statements import holds, statements

#: Marks a verbatim line of the user's words appended to a summary.
KEPT_MARK = "(kept)"
#: A kept line holds at most this many characters of the user's sentence (around the fact).
KEPT_LINE_CHARS = 300
#: At most this many kept lines are appended to one summary (the newest facts win).
MAX_KEPT_LINES = 40

_URL = re.compile(r"https?://[^\s<>\"'）)\]，。]+", re.I)
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_HANDLE = re.compile(r"(?<![\w.@])@[A-Za-z0-9_]{2,32}\b")
_DATE = re.compile(
    r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b|\b\d{1,2}\.\d{1,2}\.\d{4}\b"
    r"|\d{4}年(?:\d{1,2}月)?(?:\d{1,2}[日号])?|\d{1,2}月\d{1,2}[日号]"
    r"|\b(?:\d{1,2}(?:st|nd|rd|th)?\s+)?(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
    r"(?:\s+\d{1,2}(?:st|nd|rd|th)?)?(?:,?\s+\d{4})?\b",
    re.I)
_TIME = re.compile(r"\b\d{1,2}:\d{2}(?:\s*[ap]\.?m\.?)?\b|\b\d{1,2}\s*[ap]\.?m\.?\b"
                   r"|[上下]午\d{1,2}[点點](?:\d{1,2}分?|半)?", re.I)
_AMOUNT = re.compile(
    r"(?:[$€£¥￥]\s?\d[\d,.]*|\d[\d,.]*\s?(?:eur|euros?|usd|dollars?|gbp|cny|rmb|yuan|jpy|yen|元|块|美元|欧元|英镑|%))",
    re.I)
#: Facts found as spans, most specific first; a later pattern never matches inside an earlier one's span.
_SPANS = (_URL, _EMAIL, _HANDLE, _DATE, _TIME, _AMOUNT)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_QUOTED = re.compile(r"[\"“「『《]([^\"”」』》\n]{2,60})[\"”」』》]")
_CJK_CUE = re.compile(r"(?:我叫|名字是|名字叫|叫做|叫|住在|来自|在|是)([\u4e00-\u9fff]{2,8}?)"
                      r"(?=[，。！？,.!?\s的了吗呢]|$)")
_CJK_RUN = re.compile(r"[\u4e00-\u9fff]{2,}")
_WORD = re.compile(r"[A-Za-zÀ-ÖØ-öø-ÿ][\w'’-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])|\n+")
_FOLD_SPACE = re.compile(r"[\s\u00a0\u3000]+")
_LATIN_EDGE = re.compile(r"[0-9a-z]")

#: Capitalised words that are not names: sentence starters, pronouns, days and the like.
_NOT_NAMES = frozenset("""
i i'm i've i'd i'll me my mine we our us you your he she it they them their his her its this that these those
a an the and or but if so then than when where what which who whom whose why how yes no not ok okay hi hello hey
thanks thank please sorry dear well also just maybe can could would should will shall may might must do does did
is are was were be been am have has had let lets let's tell remember note say said ask give show find make take
monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday tonight morning evening
mr mrs ms dr there here all any some every each one two three four five six seven eight nine ten
wow oh ah aw haha lol omg yay hmm cool great nice awesome amazing same sure yeah yep nope congrats congratulations
good bye goodbye really true right wait morning night afternoon
""".split())
#: Words of an interjection or a greeting: a name after only these, or after a comma at the end, is the person
#: spoken to ("Wow Jon, same here!", "Thanks, Jon!"), not a fact.
_INTERJECTIONS = frozenset("""
wow oh ah aw haha lol omg yay hmm cool great nice awesome amazing same sure yeah yep nope congrats congratulations
good bye goodbye hi hello hey thanks thank you well morning night afternoon evening dear so ok okay one
""".split())
#: A Chinese word starting with one of these is grammar around a word, not the word itself.
_CJK_FUNCTION = frozenset("在是的了我你他她它这那和与也都就要会去来到把被给对从")
#: Chinese cue captures that are grammar, not names.
_CJK_NOT_NAMES = frozenset({"什么", "哪里", "这个", "那个", "一个", "我们", "你们", "他们", "因为", "所以", "可以",
                            "没有", "不是", "就是", "还是", "一下", "现在", "今天", "明天", "昨天"})


@dataclass(frozen=True, slots=True)
class Fact:
    """One concrete fact of a user text, and the user's sentence that holds it."""

    value: str
    sentence: str
    #: a statement about the user (summaries/statements.py): the key words a summary must hold, else empty
    keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What a summary kept of the facts, and the verbatim lines that put back what it lost."""

    total: int
    found: int
    kept_lines: tuple[str, ...]

    @property
    def share(self) -> float:
        """The share of facts the model's summary kept (1.0 when there were none)."""
        return self.found / self.total if self.total else 1.0


def fold(text: str) -> str:
    """Text folded for a literal comparison: NFKC (full-width to half-width), case-folded, spaces collapsed."""
    return _FOLD_SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def _name_runs(sentence: str) -> list[tuple[int, str]]:
    """Runs of capitalised words that are not sentence grammar, with the index of their first word."""
    runs: list[tuple[int, str]] = []
    run: list[str] = []
    start = 0
    for i, match in enumerate(_WORD.finditer(sentence)):
        word = match.group().rstrip("'’")
        if word[:1].isupper() and word.casefold() not in _NOT_NAMES:
            if not run:
                start = i
            run.append(word)
            continue
        if run:
            runs.append((start, " ".join(run)))
            run = []
    if run:
        runs.append((start, " ".join(run)))
    return runs


def _names(sentence: str, known: set[str]) -> list[str]:
    """Names and proper nouns of a sentence ("Alice Moreau", "Santa Maria", "Lisbon").

    A single capitalised word that opens the sentence counts only when it is capitalised inside a sentence
    somewhere too (``known``): "Mail me at …" is no name, "Tom is my cat" after "I call him Tom" is.
    """
    words = [m.group().rstrip("'’").casefold() for m in _WORD.finditer(sentence)]
    return [name for start, name in _name_runs(sentence)
            if (start > 0 or " " in name or name in known) and not _spoken_to(sentence, words, start, name)]


def _spoken_to(sentence: str, words: list[str], start: int, name: str) -> bool:
    """True for the name of the person addressed: after nothing but an interjection, or closing the sentence
    after a comma ("Wow Jon, same here!", "Nice one, Jon!")."""
    if all(w in _INTERJECTIONS for w in words[:start]):
        after = sentence[sentence.find(name) + len(name):].lstrip()
        return start > 0 and (not after or after[0] in ",!.?")
    before = sentence[:sentence.find(name)].rstrip()
    return start + len(name.split()) == len(words) and before.endswith(",")


def _cjk_recurring(texts: list[str]) -> set[str]:
    """Chinese words (2-4 characters) that recur across the user texts: likely names and topics."""
    counts: Counter[str] = Counter()
    for text in texts:
        seen: set[str] = set()
        for run in _CJK_RUN.findall(text):
            for n in (2, 3, 4):
                for i in range(len(run) - n + 1):
                    seen.add(run[i:i + n])
        counts.update(seen)
    recurring = {w for w, c in counts.items()
                 if c >= 2 and w not in _CJK_NOT_NAMES and w[0] not in _CJK_FUNCTION and w[-1] not in _CJK_FUNCTION}
    # keep the longest: drop a word that is part of a longer recurring word
    return {w for w in recurring if not any(w != o and w in o for o in recurring)}


def _cue_word(word: str) -> bool:
    """A word after a cue ("住在成都") is a name unless grammar opens it, or ends a longer capture ("成都" ends
    in 都 and is a city; "杭州了" is not a word)."""
    return word[0] not in _CJK_FUNCTION and (len(word) == 2 or word[-1] not in _CJK_FUNCTION)


def _strip_covered(sentence: str) -> str:
    """The sentence without URLs, addresses, handles and amounts, where capitalised words are no names."""
    for pattern in _SPANS:
        sentence = pattern.sub(" ", sentence)
    return sentence


def _contains(folded_summary: str, value: str) -> bool:
    """True when the folded summary holds the value as a whole word: "7" is not in "17", "Tom" not in
    "tomorrow" (Chinese has no word boundaries: a Chinese edge matches anywhere)."""
    key = fold(value)
    if not key:
        return True
    before = r"(?<![0-9a-z])" if _LATIN_EDGE.match(key[0]) else ""
    after = r"(?![0-9a-z])" if _LATIN_EDGE.match(key[-1]) else ""
    if key[:1].isdigit():
        before, after = r"(?<![\d.,])", r"(?![\d]|[.,]\d)" + (r"(?![a-z])" if key[-1].isalpha() else "")
    return re.search(f"{before}{re.escape(key)}{after}", folded_summary) is not None


def extract_facts(texts: list[str]) -> list[Fact]:
    """The concrete facts of ``texts`` (user messages, oldest first), each once, in order of appearance."""
    recurring = _cjk_recurring(texts)
    sentences = [(sentence, _strip_covered(sentence)) for text in texts for sentence in _sentences(text)]
    known = {name for _, plain in sentences for start, name in _name_runs(plain) if start > 0}
    facts: dict[str, Fact] = {}

    def add(value: str, sentence: str, keys: tuple[str, ...] = ()) -> None:
        value = value.strip(" .,;:!?，。")
        key = fold(value)
        if (len(key) >= 2 or key.isdigit()) and key not in facts:
            facts[key] = Fact(value, sentence, keys)

    for sentence, plain in sentences:
        found: list[tuple[int, str]] = []
        covered: list[tuple[int, int]] = []
        for pattern in (*_SPANS, _NUMBER):
            for m in pattern.finditer(sentence):
                if not any(a < m.end() and m.start() < b for a, b in covered):
                    covered.append(m.span())
                    found.append((m.start(), m.group()))
        found += [(m.start(1), m.group(1)) for m in _QUOTED.finditer(sentence)]
        found += [(sentence.find(name), name) for name in _names(plain, known)]
        found += [(m.start(1), m.group(1)) for m in _CJK_CUE.finditer(sentence)
                  if m.group(1) not in _CJK_NOT_NAMES and _cue_word(m.group(1))]
        found += [(sentence.find(word), word) for word in recurring if word in sentence]
        for _, value in sorted(found, key=lambda f: f[0]):
            add(value, sentence)
        values = [value for _, value in found]
        for clause, keys in statements(sentence):
            if not any(value in clause for value in values):  # else the clause's names and numbers stand for it
                add(clause, sentence, keys)
    return list(facts.values())


def _holds(folded_summary: str, fact: Fact) -> bool:
    """True when the folded summary holds the fact: its value, or most of a statement's key words."""
    return holds(folded_summary, fact.keys) if fact.keys else _contains(folded_summary, fact.value)


def _kept_line(fact: Fact) -> str:
    sentence = fact.sentence
    if len(sentence) > KEPT_LINE_CHARS:
        at = max(0, sentence.find(fact.value) - KEPT_LINE_CHARS // 3)
        sentence = "…" + sentence[at:at + KEPT_LINE_CHARS - 2] + "…"
    return f"- {KEPT_MARK} {_FOLD_SPACE.sub(' ', sentence)}"


def check_summary(summary: str, user_texts: list[str]) -> CheckResult:
    """Check ``summary`` against the facts of ``user_texts``; the lines to append put back what it lost."""
    facts = extract_facts(user_texts)
    folded = fold(summary)
    lost = [f for f in facts if not _holds(folded, f)]
    lines: list[str] = []
    for fact in lost:
        line = _kept_line(fact)
        if line not in lines and fold(line[len(KEPT_MARK) + 3:]) not in folded:
            lines.append(line)
    return CheckResult(total=len(facts), found=len(facts) - len(lost), kept_lines=tuple(lines[-MAX_KEPT_LINES:]))


def with_kept_lines(summary: str, result: CheckResult) -> str:
    """The summary with the kept lines appended (the summary itself when nothing was lost)."""
    if not result.kept_lines:
        return summary
    body = summary.rstrip()
    return (body + "\n" if body else "") + "\n".join(result.kept_lines)
