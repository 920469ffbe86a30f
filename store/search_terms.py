"""The words of the history-search index and of its queries, the same on SQLite and PostgreSQL.

Both databases' full-text engines split text at spaces and punctuation, so a Chinese sentence, which has
no spaces, would be one long token that no question matches. The index therefore stores each message's
text with every CJK character spaced apart (SQLite: FTS5's ``unicode61`` tokenizer over
:func:`index_text`; PostgreSQL: the same spacing in SQL, see migration 0006), and a query asks for its
Latin words as whole words and its CJK runs as two-character phrases ("西湖区" → "西 湖" and "湖 区"), so
"her" does not match "others" and 西湖 matches 杭州西湖区 but not 西 alone.
"""

from __future__ import annotations

import re
import unicodedata

#: The name SQLite knows :func:`index_text` by, in the trigger of migration 0006.
SQL_FUNCTION = "chatbot_index_text"
#: At most this many terms of a query are searched.
MAX_TERMS = 24

#: CJK characters (kana, hanzi, hangul) the index spaces apart; PostgreSQL's spacing uses the same ranges.
CJK_CLASS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_CHAR = re.compile(f"([{CJK_CLASS}])")
_CJK_RUN = re.compile(f"[{CJK_CLASS}]+")
_WORD = re.compile(r"[^\W_]+")
#: Words too common to say what a message is about; a query made of nothing else searches them anyway.
_STOP = frozenset("""a an and are as at be been but by can could did do does for from had has have he her his how
i i'm if in into is it its me my of on or our she so that the their them there they this to us was we were what
when where which who whom why will with would you your yours about any tell said say""".split())
#: Characters that are grammar in Chinese: a two-character piece made only of these says nothing.
_CJK_STOP = frozenset("的了是我你他她它吗呢吧在和有这那么个们也都就啊")


def index_text(text: str | None) -> str:
    """The text as the index stores it: NFKC-folded, CJK characters spaced apart."""
    if not text:
        return ""
    return _CJK_CHAR.sub(r" \1 ", unicodedata.normalize("NFKC", text))


def query_terms(query: str) -> list[str]:
    """The terms of a query, lower-cased: whole words, and CJK runs as two-character phrases ("西 湖")."""
    terms: list[str] = []
    folded = unicodedata.normalize("NFKC", query).casefold()
    for word in _WORD.findall(folded):
        pos = 0
        for run in _CJK_RUN.finditer(word):
            terms.extend(_WORD.findall(word[pos:run.start()]))
            chars = run.group()
            if len(chars) == 1:
                terms.append(chars)
            else:
                terms.extend(" ".join(chars[i:i + 2]) for i in range(len(chars) - 1)
                             if not (chars[i] in _CJK_STOP and chars[i + 1] in _CJK_STOP))
            pos = run.end()
        terms.extend(_WORD.findall(word[pos:]))
    unique = list(dict.fromkeys(terms))
    content = [t for t in unique if t not in _STOP and (len(t) > 1 or _CJK_RUN.match(t))]
    return (content or unique)[:MAX_TERMS]


#: Whether a query's Latin words match their other forms too ("painting" finds "paints", "painted"), as a prefix of
#: their stem (:func:`stem`).
STEMS = True
#: Endings taken off a word for its stem, longest first; the stem keeps at least :data:`STEM_LETTERS` letters.
_ENDINGS = ("ings", "ing", "edly", "ed", "ies", "es", "s", "ly", "e")
STEM_LETTERS = 4


def stem(term: str) -> str | None:
    """The prefix that matches a query word's other forms ("paintings", "painted" -> "paint"; "families" ->
    "famil"; "dance" -> "danc"), or None for a word matched as it is (short, not Latin letters, a CJK phrase)."""
    if not STEMS or not term.isascii() or not term.isalpha() or len(term) < STEM_LETTERS:
        return None
    for ending in _ENDINGS:
        if term.endswith(ending) and len(term) - len(ending) >= STEM_LETTERS:
            term = term[:-len(ending)]
            break
    if term.endswith("i") and len(term) > STEM_LETTERS:  # married -> marri -> marr(y, ied, iage)
        term = term[:-1]
    return term


def term_pattern(term: str) -> re.Pattern[str]:
    """Where a query term occurs in a message's text, as the index matches it (whole words; CJK anywhere)."""
    if _CJK_RUN.match(term):
        return re.compile(re.escape(term.replace(" ", "")))
    root = stem(term)
    if root is not None:
        return re.compile(rf"(?<![^\W_]){re.escape(root)}[^\W_]*", re.I)
    return re.compile(rf"(?<![^\W_]){re.escape(term)}(?![^\W_])", re.I)


#: Words that say nothing on their own: a turn of nothing else ("ok, thanks!") is not worth showing beside a hit,
#: nor embedding (memory/history_index.py uses this list too).
FILLER = frozenset("""ok okay k kk noted thanks thank thx ty yes yeah yep yup no nope nah sure got it great cool nice
good fine alright right lol haha hahaha hehe hmm hm oh ah wow hi hello hey bye see later np welcome please pls
done will let know understood agreed sounds""".split())
#: a token of letters and digits mixed, longer than a time or a size ("5pm", "2kg"): an id or a checksum
_CODE = re.compile(r"(?=[^\W_]*\d)(?=[^\W_]*[^\W\d_])[^\W_]{7,}")


def says_something(text: str) -> bool:
    """True when ``text`` holds a word beyond filler, stop words and codes ("ok, noted. [3fa2c1d0]" does not)."""
    for term in query_terms(text):
        if _CJK_RUN.match(term):
            return True
        if term not in FILLER and term not in _STOP and not _CODE.fullmatch(term) and not term.isdigit():
            return True
    return False
