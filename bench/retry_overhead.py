"""What the one retry policy (core/retry.py over tenacity) costs on the path that succeeds at once.

Two figures, each the median over interleaved rounds (a noisy neighbour hits every variant alike):

1. The policy alone: CPU microseconds per ``await`` of a call that returns at once: bare, through
   ``MODEL_CALL.call(...)`` (the first try awaited directly, as every layer runs it), and through
   ``MODEL_CALL.retrying(...)`` (tenacity for every try, what ``call`` avoids).
2. The model client: CPU milliseconds per ``OpenAILLM.complete()`` against the fake OpenAI server (its
   threads excluded: ``time.thread_time``), a ~21-message conversation, for this tree and for another
   source tree given with ``--base`` (e.g. the tree before the change: ``git archive <rev> | tar -x -C DIR``).
   Each tree runs in its own process, alternately.

Run: ``python bench/retry_overhead.py [--base DIR] [--rounds 9] [--calls 300]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


async def _policy_us(calls: int) -> dict[str, float]:
    from core.errors import TransientLLMError
    from core.retry import MODEL_CALL

    async def answer() -> str:
        return "ok"

    def transient(exc: BaseException) -> bool:
        return isinstance(exc, TransientLLMError)

    async def bare() -> None:
        await answer()

    async def first_direct() -> None:
        await MODEL_CALL.call(answer, retry_on=transient)

    async def tenacity_always() -> None:
        await MODEL_CALL.retrying(transient)(answer)

    figures = {}
    for name, call in (("bare call", bare), ("MODEL_CALL.call", first_direct),
                       ("MODEL_CALL.retrying", tenacity_always)):
        for _ in range(50):
            await call()
        start = time.thread_time()
        for _ in range(calls):
            await call()
        figures[name] = (time.thread_time() - start) / calls * 1e6
    return figures


async def _client_ms(calls: int) -> float:
    from agent.llm import OpenAILLM
    from tests.fakes.openai_server import FakeOpenAIServer

    sys.path.insert(0, str(HERE / "bench"))
    from llm_client import conversation  # the same messages as bench/llm_client.py

    messages = conversation(21)
    with FakeOpenAIServer() as srv:
        llm = OpenAILLM(api_key="x", base_url=srv.base_url, model="m")
        try:
            for _ in range(10):
                await llm.complete(messages)
            start = time.thread_time()
            for _ in range(calls):
                await llm.complete(messages)
            return (time.thread_time() - start) / calls * 1000
        finally:
            await llm.close()


def _worker(tree: str, calls: int) -> None:
    sys.path.insert(0, tree)
    ms = asyncio.run(_client_ms(calls))
    print(json.dumps({"ms": ms}))


def _run_tree(tree: Path, calls: int) -> float:
    out = subprocess.run([sys.executable, __file__, "--worker", str(tree), "--calls", str(calls)], cwd=tree,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["ms"]


def main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(HERE))
    rounds: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, us in asyncio.run(_policy_us(args.calls * 20)).items():
            rounds.setdefault(name, []).append(us)
    print(f"CPU us per successful call (median of {args.rounds} rounds):")
    for name, values in rounds.items():
        print(f"  {name:22s} {statistics.median(values):7.1f} us")
    trees = {"this tree": HERE}
    if args.base:
        trees["base tree"] = Path(args.base).resolve()
    client: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            client[name].append(_run_tree(tree, args.calls))
    print(f"OpenAILLM.complete(), 21 messages, CPU ms per call (median of {args.rounds} interleaved rounds):")
    here = statistics.median(client["this tree"])
    for name, values in client.items():
        med = statistics.median(values)
        print(f"  {name:10s} {med:6.3f} ms  (x{med / here:.3f} of this tree; "
              f"range {min(values):.3f}-{max(values):.3f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="another source tree to compare the client with")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.worker:
        _worker(parsed.worker, parsed.calls)
    else:
        main(parsed)
