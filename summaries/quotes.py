"""No words put in a user's mouth (DESIGN §3): a summary line that quotes the user must quote what they said.

A summary model sometimes writes a transcript line it made up ("User: I'm going to the beach.") or puts a
quotation into the user's mouth ('The user said "I'll pay on Friday"'). Before a summary is written, each
line that attributes quoted words to the user (a speaker label, or a saying verb followed by a quotation)
is compared with the users' own texts; a line whose quotation they do not hold is dropped. A summary's
ordinary bullets ("- The user plans a trip to Lisbon") quote nobody and stay, and the check's ``(kept)``
lines, which are the users' words verbatim, are added after this step.

A quotation is held when most of its words (Latin words less grammar, and two-character pieces of Chinese)
are in one user text: a model that writes "I am" for "I'm" or drops a comma still quotes faithfully.
"""

from __future__ import annotations

import re
import unicodedata

#: A quotation is the user's when one of their texts holds at least this share of its words.
HELD_SHARE = 0.8

_BULLET = r"^\s*(?:[-*•]\s*)?(?:\*\*)?"
_SPEAKER = r"(?:the\s+)?(?:user|human|customer|用户|使用者)"
#: "User: …", "- **User**: …", "用户：…"
_LABEL = re.compile(_BULLET + _SPEAKER + r"(?:\*\*)?\s*[:：]\s*(?P<quote>.+)$", re.I)
#: "The user said "…"", "user wrote: '…'", "用户说：“…”"
_SAYING = re.compile(
    _SPEAKER + r"[^\n\"“「『]{0,40}?(?:said|says|stated|states|wrote|writes|told|tells|asked|asks|replied|"
    r"mentioned|说|表示|提到|写道|问)[^\n\"“「『]{0,12}?[\"“「『'‘](?P<quote>[^\"”」』’\n]{2,})[\"”」』'’]", re.I)
_WORD = re.compile(r"[0-9a-z]+")
_CJK = re.compile(r"[\u4e00-\u9fff]+")
#: Words that do not tell one sentence from another ("I am going to the beach" and "I am going to the market").
_STOP = frozenset("""i am is are was were be me my we you it a an the to of in on at for and or but so that this
will would do not have has had""".split())
_CONTRACTIONS = {"i'm": "i am", "i've": "i have", "i'll": "i will", "i'd": "i would", "don't": "do not",
                 "can't": "can not", "won't": "will not", "it's": "it is", "we're": "we are", "'s": " is"}


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold().replace("’", "'")
    for short, long in _CONTRACTIONS.items():
        text = text.replace(short, long)
    return text


def _words(text: str) -> set[str]:
    folded = _fold(text)
    words = set(_WORD.findall(folded)) - _STOP
    for run in _CJK.findall(folded):
        words |= {run} if len(run) < 2 else {run[i:i + 2] for i in range(len(run) - 1)}
    return words


def quotation(line: str) -> str | None:
    """The words ``line`` attributes to the user as theirs, or None when it quotes nobody."""
    match = _LABEL.match(line) or _SAYING.search(line)
    if match is None:
        return None
    return match.group("quote").strip().strip("\"“”「」『』'‘’ ") or None


def said_by_user(quote: str, user_texts: list[str]) -> bool:
    """True when one of the users' texts holds most of the quotation's words."""
    words = _words(quote)
    if not words:
        return True
    return any(len(words & _words(text)) >= HELD_SHARE * len(words) for text in user_texts)


def drop_invented_quotes(summary: str, user_texts: list[str]) -> tuple[str, int]:
    """The summary without the lines that attribute to the user words no user text says, and their number."""
    kept: list[str] = []
    dropped = 0
    for line in summary.splitlines():
        quote = quotation(line)
        if quote is not None and not said_by_user(quote, user_texts):
            dropped += 1
            continue
        kept.append(line)
    return "\n".join(kept), dropped
