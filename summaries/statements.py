"""Statements a user makes about themself: facts whatever their length or case (DESIGN §3).

"i work nights at a bakery downtown", "I'm allergic to peanuts", "my daughter starts school next week",
"我住在杭州西湖区", "我在阿里巴巴工作": a place, a job, a relation, a preference, an allergy, a plan, said in
lowercase or at length, is as much a fact as a capitalised name. The summary check (summaries/facts.py)
needs each such statement kept, by the model's summary or by a verbatim ``(kept)`` line.

A sentence is split into clauses; a clause is a statement when it has a first-person subject ("I", "my",
"we", "call me"; 我) and says something of substance after it. Questions ("where do I live?", "我住在哪里？"),
requests ("给我讲个笑话"), interjections ("Wow Jon, same here!", "哇，我也是！") and empty predicates ("I think
so", "I love it", "我也这么觉得") are not. A statement's key words are its content words after the verb
(English) or the two-character pieces of what follows 我 (Chinese, which has no spaces); a summary holds the
statement when it holds most of them, so "The user works night shifts at a downtown bakery" holds the
bakery statement and "The user works at night" does not.
"""

from __future__ import annotations

import re

#: A summary holds a statement when it holds at least this share of the statement's key words.
COVERAGE = 0.75

_CLAUSE_SPLIT = re.compile(r"[,;，；：]|:(?!\d)|\s+(?:but|so|because)\s+|(?:但是|不过|因为|所以)")
_WORD = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?")
_CJK = re.compile(r"[\u4e00-\u9fff]+")
_DIGITS = re.compile(r"\d+")

#: Words that open an English question.
_EN_QUESTION = frozenset("""what where when who whom whose why how which do does did is are am was were can could would
should will shall may might have has isn't aren't don't doesn't didn't won't wouldn't""".split())
#: First-person subjects, and the verb forms glued to them.
_EN_SUBJECT = frozenset("i i'm im i've ive i'd i'll we we're we've our my".split())
#: Verbs and adverbs right after the subject that carry no fact of their own (skipped before the key words).
_EN_AUX = frozenset("""am 'm m is are was were be been have has had 've do does did don't doesn't didn't can can't
cannot could couldn't will won't would 'll 'd not never also still usually always just really currently now
often sometimes already actually even only mostly generally rarely""".split())
#: Verbs after "I" that make the clause an opinion or a reaction, not a fact ("I think so", "I guess").
_EN_REACTION = frozenset("""think thought guess know knew mean meant see saw agree hope wonder bet suppose understand
believe feel felt doubt forgot remember promise wish appreciate totally absolutely""".split())
#: Words that are never key words: grammar, pronouns, moods and fillers.
_EN_STOP = frozenset("""a an the and or of to in on at for with from by as about into over under up down out off
than then that this these those it its it's there here so too very much many more most some any all no not yes
just really quite pretty such what which who whom whose where when why how me you your yours he him his she her
they them their we us our i my mine myself is are was were be been being am have has had do does did can could
will would shall should may might must 'm 're 's 've 'll 'd fine good great ok okay sure sorry glad happy sad
tired bored excited back done ready kidding joking serious afraid confused lost curious impressed jealous busy
thanks thank lol haha wow oh ah hmm idea clue worries problem way one thing things stuff like love hate""".split())
#: "my …" openers that are interjections, not facts ("oh my god", "my bad").
_EN_NOT_POSSESSION = frozenset("god gosh goodness bad pleasure word lord".split())

#: Clauses opening like this are requests to the bot, not statements ("给我讲个笑话吧").
_ZH_REQUEST = re.compile(r"^(?:请|给我|帮我|告诉我|跟我|陪我|你|您|能不能|可以|麻烦)")
_ZH_QUESTION = re.compile(r"吗|什么|哪|谁|(?<!好)几[个岁点号月]|多少|怎么|为什么|是不是|有没有")
#: Characters that are grammar, not content, in what follows 我.
_ZH_FUNCTION = frozenset("我们的了也都就还很最是在有要会和与跟把被给对从着过吧呢啊哦呀嘛这那个一不没太真挺")
#: What follows 我 in a reaction, not a fact ("我也是", "我也这么觉得", "我想想", "我都不知道").
_ZH_REACTION = re.compile(r"^(?:也是|也这么|这么|觉得|认为|想想|看看|知道|不知道|都不知道|明白|懂|同意|试试|"
                          r"随便|无所谓|没事|还好|挺好|很好|开心|高兴|喜欢这|爱死)")


def _clauses(sentence: str) -> list[str]:
    return [c.strip() for c in _CLAUSE_SPLIT.split(sentence) if c and c.strip()]


def _english(clause: str) -> tuple[str, ...] | None:
    """The key words of an English statement about the user, or None when the clause is not one."""
    words = _WORD.findall(clause.lower().replace("’", "'"))
    if not words or words[0] in _EN_QUESTION:
        return None
    for i, word in enumerate(words):
        if word == "me" and i and words[i - 1] in ("call", "called", "calls"):
            rest = words[i + 1:]
            break
        if word not in _EN_SUBJECT:
            continue
        rest = words[i + 1:]
        if word in ("my", "our"):
            if not rest or rest[0] in _EN_NOT_POSSESSION:
                return None
            rest = [w for w in rest if w not in _EN_AUX]
            break
        while rest and rest[0] in _EN_AUX:
            rest = rest[1:]
        if rest and rest[0] in _EN_REACTION:
            return None
        rest = rest[1:] if rest and word in ("i", "we") else rest  # the verb itself: summaries inflect it
        break
    else:
        return None
    keys = tuple(dict.fromkeys(w for w in rest if w not in _EN_STOP and (len(w) > 1 or w.isdigit())))
    return keys or None


def _chinese(clause: str) -> tuple[str, ...] | None:
    """The key pieces of a Chinese statement about the user, or None when the clause is not one."""
    at = clause.find("我")
    if at < 0 or _ZH_REQUEST.match(clause) or _ZH_QUESTION.search(clause):
        return None
    after = clause[at + 1:].lstrip("们")
    if _ZH_REACTION.match(after.lstrip("也都还就真")):
        return None
    content = (clause[:at] + " " + after).replace("我", " ")
    keys: list[str] = []
    for run in _CJK.findall(content):
        pieces = [run] if len(run) <= 2 else [run[i:i + 2] for i in range(len(run) - 1)]
        keys += [p for p in pieces if not all(ch in _ZH_FUNCTION for ch in p)]
    keys += _DIGITS.findall(content)
    keys += [w for w in _WORD.findall(content.lower()) if w not in _EN_STOP]
    unique = tuple(dict.fromkeys(keys))
    return unique if sum(len(k) for k in unique) >= 2 else None


def statements(sentence: str) -> list[tuple[str, tuple[str, ...]]]:
    """Each clause of ``sentence`` that states something about the user, with its key words."""
    found = []
    for clause in _clauses(sentence):
        keys = _chinese(clause) if _CJK.search(clause) else _english(clause)
        if keys:
            found.append((clause.strip(" .!?。！？"), keys))
    return found


def _has_word(folded_summary: str, key: str) -> bool:
    if _CJK.match(key):
        return key in folded_summary
    stem = key[:-1] if len(key) > 4 and key.isalpha() else key  # "nights" holds "night", "hospital" "hospitals"
    if len(stem) > 5 and stem.endswith(("ing", "ed")):
        stem = stem[:-3] if stem.endswith("ing") else stem[:-2]
    return re.search(rf"(?<![0-9a-z]){re.escape(stem)}[a-z]*(?![0-9])", folded_summary) is not None


def holds(folded_summary: str, keys: tuple[str, ...]) -> bool:
    """True when the folded summary holds enough of a statement's key words (see :data:`COVERAGE`)."""
    present = sum(1 for key in keys if _has_word(folded_summary, key))
    return present >= COVERAGE * len(keys)
