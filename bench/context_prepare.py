"""Benchmark of the context engine: prepare_context on a 1,000-message history, and token counting speed.

Run: ``python bench/context_prepare.py``. Targets: prepare_context <= 1 ms median with cached counts
on a history that already fits, and token counting >= 5 MB/s.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.context import Budget, prepare_context
from agent.tokens import TokenCounter  # noqa: E402
from core.turns import CtxMessage

MODEL = "gpt-4o"
ENGLISH = (
    "The quick brown fox jumps over the lazy dog while the team reviews the deployment plan for Friday. "
    "We agreed to keep the old endpoint alive until the migration finishes, and to log every fallback. "
)
CHINESE = (
    "人工智能正在改变我们的生活方式。在过去的十年里，机器学习技术取得了巨大的进步，尤其是在自然语言处理领域。"
    "我们今天讨论的是如何管理长对话的上下文，以及怎样在不丢失重要信息的前提下压缩历史记录。"
)
MIXED = "Deploy v2.3 到生产环境 at 18:00 UTC；请确认 rollback plan 已经准备好 (see JIRA-1234)，然后通知 on-call。 "


def build_history(n_messages: int) -> list[CtxMessage]:
    """A realistic history: turns of user, assistant tool call, tool result, final answer."""
    msgs: list[CtxMessage] = []
    seq = 0
    while len(msgs) < n_messages:
        seq += 1
        msgs.append(CtxMessage(seq, {"role": "user", "content": MIXED}))
        seq += 1
        call = {"id": f"call_{seq}", "type": "function", "function": {"name": "web_search", "arguments": '{"q":"x"}'}}
        msgs.append(CtxMessage(seq, {"role": "assistant", "content": None, "tool_calls": [call]}))
        seq += 1
        msgs.append(CtxMessage(seq, {"role": "tool", "tool_call_id": f"call_{seq - 1}", "content": ENGLISH * 5}))
        seq += 1
        msgs.append(CtxMessage(seq, {"role": "assistant", "content": ENGLISH}))
    return msgs[:n_messages]


def bench_prepare(counter: TokenCounter, budget: Budget, runs: int = 2000) -> tuple[float, float, int]:
    """Median and p95 in ms of prepare_context on 1,000 messages with cached counts, and the kept tokens."""
    msgs = build_history(1000)
    first = prepare_context(msgs, budget, counter)  # fills the cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        prepare_context(msgs, budget, counter)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95)], first.tokens


def bench_counting(counter: TokenCounter, sample: str, target_bytes: int = 4_000_000) -> float:
    """Token counting speed in MB/s of UTF-8 input, over message-sized texts (about 2 KB each)."""
    piece = sample * max(1, 2000 // len(sample.encode()))
    texts = [piece + str(i) for i in range(max(1, target_bytes // len(piece.encode())))]
    total = sum(len(t.encode()) for t in texts)
    start = time.perf_counter()
    for text in texts:
        counter.count_text(text)
    return total / (time.perf_counter() - start) / 1e6


def main() -> None:
    """Run both benchmarks and print the figures."""
    start = time.perf_counter()
    counter = TokenCounter(MODEL)
    print(f"tokenizer {counter.encoding_name} (exact={counter.exact}) loaded in {time.perf_counter() - start:.2f} s")
    median, p95, tokens = bench_prepare(counter, Budget(max_turns=1000, max_tokens=10**9))
    print(f"prepare_context, 1,000 messages that fit ({tokens:,} tokens), cached counts: median {median:.3f} ms, "
          f"p95 {p95:.3f} ms (target <= 1 ms)")
    median, p95, tokens = bench_prepare(counter, Budget(max_turns=20, max_tokens=20_000))
    print(f"prepare_context, 1,000 messages over both budgets (keeps {tokens:,} tokens): median {median:.3f} ms, "
          f"p95 {p95:.3f} ms")
    for name, sample in (("English", ENGLISH), ("Chinese", CHINESE), ("mixed", MIXED)):
        print(f"count_text {name}: {bench_counting(counter, sample):.1f} MB/s (target >= 5 MB/s)")


if __name__ == "__main__":
    main()
