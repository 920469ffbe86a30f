"""The context engine: turns, tool-result truncation, turn and token budgets, overflow trim, pairing repair.

Everything here is pure and synchronous. Messages are OpenAI chat-format dicts wrapped in
:class:`CtxMessage`, which carries the store seq and a cached token count. A dict is never changed in
place (the store, the summariser or a running turn may hold it): a shortened message is a copy in a
new :class:`CtxMessage`. The only change made to inputs is filling the ``CtxMessage.tokens`` cache.

The "current turn" is always the last turn: the newest user message and its in-progress tool chain.
It is never dropped and its tool results are never cut by :func:`prepare_context`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent.tokens import TokenCounter
from core.turns import CtxMessage, Turn, content_text, group_turns, text_only

logger = logging.getLogger(__name__)

#: DESIGN §2.1 step 1: historical tool results longer than this are cut to this many characters.
TOOL_RESULT_HISTORY_CHARS = 20_000
#: DESIGN §2.1 step 3: below this many turns, compress to text before dropping.
COMPRESS_BELOW_TURNS = 5
#: The smallest history budget, whatever the window and the system prompt say.
MIN_HISTORY_TOKENS = 256
#: Cutting the current user text never goes below this many characters.
MIN_USER_CHARS = 1_000
#: The share of a cut text kept from its end (the rest comes from its start).
TAIL_SHARE = 0.2
#: The first line of the group background block shown with a request in a group (DESIGN §1.3).
BACKGROUND_HEADER = "[Said in this group since your last answer here, not addressed to you]"
#: A background line is shown up to this many characters.
BACKGROUND_LINE_CHARS = 2_000
#: Tokens for the separator between the block and the request's text.
BACKGROUND_OVERHEAD_TOKENS = 4
#: Content of the tool message added for a tool call whose result is missing.
MISSING_RESULT = "[No result: the tool call was interrupted]"


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits for the history part of the context."""

    max_turns: int  # agent_max_context_turns
    max_tokens: int  # tokens for the history: see history_budget()
    #: cutting the current user text stops here; overflow recovery goes lower, since the server refused it
    min_user_chars: int = MIN_USER_CHARS


@dataclass(slots=True)
class PrepareResult:
    """What prepare_context() and overflow_trim() kept and removed."""

    messages: list[CtxMessage]  # the kept context; becomes the session's new in-memory context
    dropped: list[Turn]  # turns removed from the context, oldest first (they go to the summariser)
    actions: list[str]  # short human-readable log of what was done
    tokens: int  # token count of the kept messages


def _content_len(content: Any) -> int:
    """The number of text characters in a message content."""
    if isinstance(content, str):
        return len(content)
    return len(content_text(content))


def history_budget(max_context_tokens: int, window: int, reserved_tokens: int) -> int:
    """Tokens for the history: min(max_context_tokens, window - 10 %) minus the reserved tokens, floored."""
    return max(MIN_HISTORY_TOKENS, min(max_context_tokens, window - window // 10) - reserved_tokens)


def cut_text(text: str, limit: int, *, keep_tail: bool = True, what: str = "Text") -> str:
    """``limit`` characters of ``text`` (head, and tail if asked) around a one-line notice; short texts as is."""
    if len(text) <= limit:
        return text
    notice = f"[{what} truncated: kept {limit:,} of {len(text):,} characters]"
    tail = int(limit * TAIL_SHARE) if keep_tail else 0
    head = text[: limit - tail]
    if tail:
        return f"{head}\n\n{notice}\n\n{text[-tail:]}"
    return f"{head}\n\n{notice}"


def injection_text(summary: str, turns: int, original: str) -> str:
    """The first kept user message with the summary of the compacted turns injected before it (DESIGN §3's
    exact text for N turns; one turn reads "1 turn was compacted")."""
    compacted = "1 turn was compacted" if turns == 1 else f"{turns} turns were compacted"
    return (
        f"[System: Previous conversation summary \u2014 {compacted}]\n\n{summary}\n\n"
        f"The recent conversation continues below.\n\n---\n\n{original}"
    )


def _count(m: CtxMessage, counter: TokenCounter) -> int:
    """The message's token count, from the cache or counted (and cached) now."""
    tokens = m.tokens
    if tokens is None:
        tokens = m.tokens = counter.count_message(m.message)
    return tokens


def _turn_tokens(turn: Turn, counter: TokenCounter) -> int:
    """The total tokens of a turn's messages."""
    return sum(_count(m, counter) for m in turn.messages)


def _with_content(m: CtxMessage, content: str, *, truncated: bool = False) -> CtxMessage:
    """A new CtxMessage holding a copy of ``m``'s message with another content (token count reset)."""
    return CtxMessage(m.seq, {**m.message, "content": content}, None, truncated or m.truncated)


def _cut_tool_result(m: CtxMessage, limit: int) -> CtxMessage:
    """A copy of a tool message whose content is cut to ``limit`` characters."""
    text = content_text(m.message.get("content"))
    return _with_content(m, cut_text(text, limit, what="Tool result"), truncated=True)


def _fits_fast(msgs: list[CtxMessage], budget: Budget, counter: TokenCounter) -> int | None:
    """The total tokens if nothing at all needs doing, else None (one pass, no copies)."""
    turns = 0
    total = 0
    long_tool_before_last_user = False
    long_tool_pending = False  # a long untruncated tool result seen since the last user message
    for m in msgs:
        message = m.message
        role = message.get("role")
        if role == "user":
            turns += 1
            if long_tool_pending:
                long_tool_before_last_user = True
        elif role == "tool" and not m.truncated and _content_len(message.get("content")) > TOOL_RESULT_HISTORY_CHARS:
            long_tool_pending = True
        tokens = m.tokens
        total += tokens if tokens is not None else _count(m, counter)
    if msgs and msgs[0].message.get("role") != "user":
        turns += 1
    if long_tool_before_last_user or turns > budget.max_turns or total > budget.max_tokens:
        return None
    return total


def prepare_context(msgs: list[CtxMessage], budget: Budget, counter: TokenCounter) -> PrepareResult:
    """Apply DESIGN §2.1 steps 1-3 to a session's context and return what is kept and what is dropped."""
    total = _fits_fast(msgs, budget, counter)
    if total is not None:
        return PrepareResult(list(msgs), [], [], total)

    actions: list[str] = []
    dropped: list[Turn] = []
    turns = group_turns(msgs)

    # 1. Historical tool results (every turn but the current one).
    cut = 0
    for turn in turns[:-1]:
        for i, m in enumerate(turn.messages):
            if (
                m.message.get("role") == "tool"
                and not m.truncated
                and _content_len(m.message.get("content")) > TOOL_RESULT_HISTORY_CHARS
            ):
                turn.messages[i] = _cut_tool_result(m, TOOL_RESULT_HISTORY_CHARS)
                cut += 1
    if cut:
        actions.append(f"truncated {cut} tool result{'s' if cut != 1 else ''}")

    # 2. Turn budget, once.
    if len(turns) > budget.max_turns:
        n = len(turns) // 2
        dropped.extend(turns[:n])
        turns = turns[n:]
        actions.append(f"dropped {n} turns (turn budget)")

    # 3. Token budget.
    turns, total = _fit_token_budget(turns, budget.max_tokens, counter, dropped, actions, budget.min_user_chars)

    kept = [m for t in turns for m in t.messages]
    if actions:
        logger.debug("Context prepared: %s", "; ".join(actions))
    return PrepareResult(kept, dropped, actions, total)


def _fit_token_budget(
    turns: list[Turn], max_tokens: int, counter: TokenCounter, dropped: list[Turn], actions: list[str],
    min_user_chars: int = MIN_USER_CHARS,
) -> tuple[list[Turn], int]:
    """DESIGN §2.1 step 3: compress or drop turns until they fit; every step strictly shrinks the context.

    Returns the kept turns and their tokens; appends removed turns to ``dropped`` and notes to ``actions``.
    ``originals`` keeps each turn as it was before compression: a dropped turn goes to the summariser whole.
    """
    originals = list(turns)
    sizes = [_turn_tokens(t, counter) for t in turns]
    total = sum(sizes)
    compressed = False
    drops = 0

    def note_drops() -> None:
        nonlocal drops
        if drops:
            actions.append(f"dropped {drops} turns (token budget)")
            drops = 0

    while total > max_tokens:
        if len(turns) == 1:
            turns[0], note = _fit_current_turn(turns[0], max_tokens, counter, min_user_chars)
            note_drops()
            if note:
                actions.append(note)
            total = _turn_tokens(turns[0], counter)
            break
        if len(turns) < COMPRESS_BELOW_TURNS:
            if not compressed:
                compressed = True  # compressing twice changes nothing: next time, drop
                new_turns = [text_only(t) for t in turns[:-1]]
                new_sizes = [_turn_tokens(t, counter) for t in new_turns]
                if sum(new_sizes) < sum(sizes[:-1]):
                    changed = sum(1 for old, new in zip(turns, new_turns, strict=False) if old is not new)
                    turns[:-1] = new_turns
                    sizes[:-1] = new_sizes
                    total = sum(sizes)
                    note_drops()
                    actions.append(f"compressed {changed} turns to text")
                    continue
            n = 1
        else:
            n = len(turns) // 2
        dropped.extend(originals[:n])
        del turns[:n], sizes[:n], originals[:n]
        total = sum(sizes)
        drops += n
    note_drops()
    if total > max_tokens:
        actions.append(f"the current turn alone exceeds the budget ({total} > {max_tokens} tokens)")
    return turns, total


def _fit_current_turn(turn: Turn, max_tokens: int, counter: TokenCounter,
                      min_user_chars: int = MIN_USER_CHARS) -> tuple[Turn, str]:
    """The current turn with its user text cut (head and tail) so the turn fits, if cutting can help."""
    index = next((i for i, m in enumerate(turn.messages) if m.message.get("role") == "user"), None)
    if index is None:
        return turn, ""
    user = turn.messages[index]
    text = content_text(user.message.get("content"))
    others = _turn_tokens(turn, counter) - _count(user, counter)
    text_tokens = max(1, counter.count_text(text))
    available = max_tokens - others
    if available <= 0:
        return turn, ""  # the tool chain alone is too big: cutting the question would not help
    limit = int(len(text) * available / text_tokens * 0.95)
    best = None
    while True:
        limit = max(limit, min_user_chars)
        if limit >= len(text):
            break
        candidate = _with_content(user, cut_text(text, limit, what="Message"))
        best = candidate
        if others + _count(candidate, counter) <= max_tokens or limit == min_user_chars:
            break
        limit = int(limit * 0.8)
    if best is None:
        return turn, ""
    messages = list(turn.messages)
    messages[index] = best
    return Turn(messages), f"cut the current user message to {limit:,} of {len(text):,} characters"


def _cut_arguments(arguments: str, limit: int) -> str:
    """Tool-call arguments cut to ``limit`` characters, still valid JSON so the provider accepts them."""
    return json.dumps({"truncated": cut_text(arguments, limit, what="Arguments")}, ensure_ascii=False)


def _overflow_cut(m: CtxMessage, limit: int) -> CtxMessage:
    """A message with its tool result, tool-call arguments or user text cut to ``limit`` characters."""
    message = m.message
    role = message.get("role")
    if role == "tool" and _content_len(message.get("content")) > limit:
        return _cut_tool_result(m, limit)
    if role == "user" and _content_len(message.get("content")) > limit:
        return _with_content(m, cut_text(content_text(message.get("content")), limit, what="Message"))
    calls = message.get("tool_calls")
    if role == "assistant" and calls:
        new_calls = []
        changed = False
        for call in calls:
            args = (call.get("function") or {}).get("arguments")
            if isinstance(args, str) and len(args) > limit:
                call = {**call, "function": {**call["function"], "arguments": _cut_arguments(args, limit)}}
                changed = True
            new_calls.append(call)
        if changed:
            return CtxMessage(m.seq, {**message, "tool_calls": new_calls}, None, m.truncated)
    return m


def overflow_trim(
    msgs: list[CtxMessage], keep_turns: int, counter: TokenCounter, char_limit: int = 10_000
) -> PrepareResult:
    """DESIGN §2.3: keep the last ``keep_turns`` turns, cut long texts to ``char_limit``, repair pairing."""
    turns = group_turns(msgs)
    keep = max(1, keep_turns)
    dropped = turns[:-keep] if len(turns) > keep else []
    kept_turns = turns[-keep:]
    actions: list[str] = []
    if dropped:
        actions.append(f"dropped {len(dropped)} turns (overflow)")
    kept: list[CtxMessage] = []
    cut = 0
    for t in kept_turns:
        for m in t.messages:
            new = _overflow_cut(m, char_limit)
            cut += new is not m
            kept.append(new)
    if cut:
        actions.append(f"cut {cut} messages to {char_limit:,} characters")
    repaired: list[CtxMessage] = []
    for item in _pairing_plan([m.message for m in kept]):
        repaired.append(kept[item] if isinstance(item, int) else CtxMessage(0, item))
    if len(repaired) != len(kept) or any(a is not b for a, b in zip(repaired, kept, strict=False)):
        actions.append("repaired tool-call pairing")
    tokens = sum(_count(m, counter) for m in repaired)
    return PrepareResult(repaired, dropped, actions, tokens)


def _pairing_plan(messages: list[dict[str, Any]]) -> list[int | dict[str, Any]]:
    """The repaired history as indexes into ``messages`` (kept as is) and new dicts (added or changed)."""
    plan: list[int | dict[str, Any]] = []
    i = 0
    n = len(messages)
    while i < n and messages[i].get("role") in ("assistant", "tool"):
        i += 1  # leading assistant/tool messages before the first user message
    while i < n:
        message = messages[i]
        role = message.get("role")
        calls = message.get("tool_calls") if role == "assistant" else None
        if role == "tool":
            i += 1  # an orphan: no assistant tool call directly before it
            continue
        if role == "assistant" and "tool_calls" in message and not calls:
            plan.append({k: v for k, v in message.items() if k != "tool_calls"})  # providers reject []
            i += 1
            continue
        plan.append(i)
        i += 1
        if not calls:
            continue
        pending = [c.get("id") for c in calls if c.get("id")]
        waiting = set(pending)
        while i < n and messages[i].get("role") == "tool":
            call_id = messages[i].get("tool_call_id")
            if call_id in waiting:
                waiting.discard(call_id)
                plan.append(i)
            i += 1
        for call_id in pending:
            if call_id in waiting:
                waiting.discard(call_id)
                plan.append({"role": "tool", "tool_call_id": call_id, "content": MISSING_RESULT})
    return plan


def repair_pairing(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A new history in which every tool call has its result right after it and no tool result is orphaned."""
    return [messages[item] if isinstance(item, int) else item for item in _pairing_plan(messages)]


def _inject(message: dict[str, Any], summary: str, turns: int) -> dict[str, Any]:
    """A copy of a user message with the summary injected before its text."""
    content = message.get("content")
    if isinstance(content, list):
        parts: list[Any] = list(content)
        for i, part in enumerate(parts):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts[i] = {**part, "text": injection_text(summary, turns, part["text"])}
                break
        else:
            parts.insert(0, {"type": "text", "text": injection_text(summary, turns, "")})
        return {**message, "content": parts}
    return {**message, "content": injection_text(summary, turns, content if isinstance(content, str) else "")}


def fit_background(lines: list[str], max_tokens: int, counter: TokenCounter) -> tuple[str, int]:
    """The group background block (DESIGN §1.3) holding the newest ``lines`` that fit in ``max_tokens``.

    Returns the block and its tokens; ("", 0) when not even one line fits. Older lines yield first.
    """
    if not lines or max_tokens <= 0:
        return "", 0
    total = counter.count_text(BACKGROUND_HEADER) + BACKGROUND_OVERHEAD_TOKENS
    kept: list[str] = []
    for line in reversed(lines):
        line = cut_text(line, BACKGROUND_LINE_CHARS, keep_tail=False, what="Message")
        tokens = counter.count_text(line) + 1
        if total + tokens > max_tokens:
            break
        kept.append(line)
        total += tokens
    if not kept:
        return "", 0
    return "\n".join([BACKGROUND_HEADER, *reversed(kept)]), total


#: The first line of the knowledge passages put in a turn with ``knowledge_auto`` (DESIGN §14).
PASSAGES_HEADER = ("[Passages from the knowledge base that may answer this message; cite them as written, e.g. "
                   "[name, p. 3]:]")


def fit_passages(passages: list[str], max_tokens: int, counter: TokenCounter) -> tuple[str, int]:
    """The knowledge block holding the best ``passages`` (best first) that fit in ``max_tokens``; ("", 0) when
    none fits. A passage that does not fit is left out, the next (shorter) one may still go in."""
    if not passages or max_tokens <= 0:
        return "", 0
    total = counter.count_text(PASSAGES_HEADER) + BACKGROUND_OVERHEAD_TOKENS
    kept: list[str] = []
    for passage in passages:
        tokens = counter.count_text(passage) + 2
        if total + tokens > max_tokens:
            continue
        kept.append(passage)
        total += tokens
    if not kept:
        return "", 0
    return "\n\n".join([PASSAGES_HEADER, *kept]), total


def message_text(message: dict[str, Any]) -> str:
    """The text of a request message: its string content, or its text parts joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _prefix_text(message: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A copy of a user message with ``prefix`` before its text."""
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [{"type": "text", "text": prefix}, *content]}
    return {**message, "content": prefix + (content if isinstance(content, str) else "")}


def render_messages(
    system_prompt: str, msgs: Iterable[CtxMessage], summary: str | None, summary_turns: int, background: str = ""
) -> list[dict[str, Any]]:
    """The request messages: system prompt, then the repaired history with the summary injected.

    A group background block goes before the text of the current (last) user message: in the request
    only, so providers that insist on alternating roles accept it and the session's turns stay as said.
    """
    history = repair_pairing([m.message for m in msgs])
    if summary:
        for i, message in enumerate(history):
            if message.get("role") == "user":
                history[i] = _inject(message, summary, summary_turns)
                break
    if background:
        for i in range(len(history) - 1, -1, -1):
            if history[i].get("role") == "user":
                history[i] = _prefix_text(history[i], f"{background}\n\n---\n\n")
                break
    return [{"role": "system", "content": system_prompt}, *history]
