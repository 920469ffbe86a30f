"""Throughput with many chats at once: ``python app.py`` against the fake Bot API and fake OpenAI server.

The bot runs as a subprocess (its own core); the fakes run in threads of this process. Each chat sends
three messages (``m0``, ``m1``, ``m2``) pushed all at once; the model answers ``echo: <text>`` after
``--latency`` seconds. We wait for every reply, then report throughput (turns/s), its ratio to the
ideal ``max_concurrent_turns / latency``, and whether each chat got its replies in order. CPU use of the
bot and of the fakes is reported, and a probe measures what the fakes alone can serve, so a slow fake
cannot pass for a slow bot.

Run: ``python bench/concurrency.py`` (add ``--max-concurrent 64 128`` to also show 128).
Target: >= 250 turns/s at 500 chats with the default 64 concurrent turns and 200 ms model latency.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import ROOT, median, percentile, print_table, process_cpu  # noqa: E402
from tests.fakes.bot_process import BotProcess, clean_env  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402
from tests.fakes.telegram_api import FakeTelegramAPI  # noqa: E402

MESSAGES_PER_CHAT = 3
#: The fakes' ThreadingHTTPServer keeps the stdlib listen backlog of 5: a burst of 64 new connections
#: (the bot's first requests, and the probe's one connection per request) overflows it, and the kernel
#: drops SYNs (1 s retransmits) or resets connections. We widen it in this process unless --stock-backlog.
WIDE_BACKLOG = 1024
TURN_LOG = re.compile(r"session telegram:(\d+): ok in (\d+) ms")


@dataclass
class Round:
    """One burst of ``chats`` x 3 messages."""

    chats: int
    seconds: float
    turns: int
    out_of_order: int
    bot_cpu: float  # cores
    fakes_cpu: float  # cores (this whole process: fake servers and the waiting main thread)
    bot_turn_ms: float  # median time a turn held its concurrency slot, from the bot's log

    @property
    def rate(self) -> float:
        """Turns per second."""
        return self.turns / self.seconds

    @property
    def cpu_per_turn(self) -> float:
        """The bot's CPU time per turn (ms, all its threads): steadier than the wall time on a shared machine."""
        return self.bot_cpu * self.seconds / max(1, self.turns) * 1000


def profiler_args(path: Path) -> list[str]:
    """``-m`` arguments: pyinstrument for a ``.pyisession`` path (render it with ``pyinstrument --load PATH
    -r text -p flat=true``), cProfile stats otherwise."""
    if path.suffix == ".pyisession":
        return ["pyinstrument", "-r", "pyisession", "-o", str(path)]
    return ["cProfile", "-o", str(path)]


class ProfiledBot(BotProcess):
    """``app.py`` under a profiler (see :func:`profiler_args`); the profile is written at exit."""

    def __init__(self, folder: Path, profile: Path, **settings: object) -> None:
        super().__init__(folder, **settings)
        self.profile = profile

    def command(self) -> list[str]:
        """``app.py`` under the profiler."""
        return [sys.executable, "-m", *profiler_args(self.profile), str(ROOT / "app.py"), "--config",
                str(self.config_path)]


def settings(api: FakeTelegramAPI, llm: FakeOpenAIServer, max_concurrent: int, stream: bool = True) -> dict:
    """The bot's config.json."""
    return {"channel_type": "telegram", "telegram_bot_token": api.token, "telegram_base_url": api.base_url,
            "telegram_rate_limit": False, "open_ai_api_base": llm.base_url, "open_ai_api_key": "test",
            "model_max_parallel": 1000,  # the fake stands in for a remote provider: no one-slot limit
            "data_dir": "data", "max_concurrent_turns": max_concurrent, "stream_replies": stream}


def run_round(api: FakeTelegramAPI, bot: BotProcess, chats: int, first_chat: int, timeout: float) -> Round:
    """Push every message of ``chats`` chats at once and wait for all replies."""
    assert bot.proc is not None
    before = len(api.sent)
    log_before = len(bot.log())
    expected = chats * MESSAGES_PER_CHAT
    cpu_bot, cpu_self = process_cpu(bot.proc.pid), time.process_time()
    started = time.perf_counter()
    for m in range(MESSAGES_PER_CHAT):
        for c in range(first_chat, first_chat + chats):
            api.push_text(c, f"c{c} m{m}", user_id=c, first_name=f"User{c}")
    try:
        api.wait_for_sent_sync(before + expected, timeout=timeout)
    except TimeoutError:
        print(f"  timed out after {timeout:.0f} s with {len(api.sent) - before} of {expected} replies", flush=True)
    seconds = time.perf_counter() - started
    bot_cpu = (process_cpu(bot.proc.pid) - cpu_bot) / seconds
    fakes_cpu = (time.process_time() - cpu_self) / seconds
    replies: dict[int, list[str]] = {}
    for sent in api.sent[before:]:
        replies.setdefault(int(sent["chat_id"]), []).append(sent["text"])
    wrong = {c: replies.get(c) for c in range(first_chat, first_chat + chats)
             if replies.get(c) != [f"echo: c{c} m{m}" for m in range(MESSAGES_PER_CHAT)]}
    out_of_order = len(wrong)
    for c, got in list(wrong.items())[:3]:
        print(f"  chat {c} got {got!r}", flush=True)
    time.sleep(0.3)  # let the last turns' log lines land
    turn_ms = [int(ms) for sid, ms in TURN_LOG.findall(bot.log()[log_before:])
               if first_chat <= int(sid) < first_chat + chats]
    return Round(chats, seconds, len(api.sent) - before, out_of_order, bot_cpu, fakes_cpu, median(turn_ms))


# --- the fakes alone ------------------------------------------------------------------------------
async def _http(host: str, port: int, path: str, body: bytes, ctype: str) -> bytes:
    """One HTTP/1.0 POST over a fresh connection, the body of the answer (the fakes keep connections alive
    for the bot; a connection per request is the probe's worst case for them)."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"POST {path} HTTP/1.0\r\nHost: {host}\r\nContent-Type: {ctype}\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    return data.split(b"\r\n\r\n", 1)[1]


async def _probe(tg: str, oa: str, turns: int, concurrency: int) -> dict:
    """What one bot turn asks of the fakes (typing, completion, sendMessage), ``concurrency`` at a time.

    A lean raw-socket client, so that the measurement is of the fakes, not of a client library.
    """
    from urllib.parse import urlencode, urlsplit

    tg_url, oa_url = urlsplit(tg), urlsplit(oa)
    form = "application/x-www-form-urlencoded"
    sem = asyncio.Semaphore(concurrency)

    async def turn(i: int) -> None:
        chat = 9_000_000 + i
        async with sem:
            await _http(tg_url.hostname, tg_url.port, f"{tg_url.path}/sendChatAction",
                        urlencode({"chat_id": chat, "action": "typing"}).encode(), form)
            body = {"model": "m", "messages": [{"role": "system", "content": "You are helpful."},
                                               {"role": "user", "content": f"c{chat} m0"}]}
            answer = await _http(oa_url.hostname, oa_url.port, f"{oa_url.path}/chat/completions",
                                 json.dumps(body).encode(), "application/json")
            text = json.loads(answer)["choices"][0]["message"]["content"]
            await _http(tg_url.hostname, tg_url.port, f"{tg_url.path}/sendMessage",
                        urlencode({"chat_id": chat, "text": text, "parse_mode": "HTML"}).encode(), form)

    started = time.perf_counter()
    cpu = time.process_time()
    await asyncio.gather(*(turn(i) for i in range(turns)))
    return {"seconds": time.perf_counter() - started, "client_cpu": time.process_time() - cpu}


def fakes_capacity(api: FakeTelegramAPI, llm: FakeOpenAIServer, turns: int,
                   concurrency: int) -> tuple[float, float, float]:
    """Turns/s the fakes serve to a lean client in another process; the fakes' and the client's CPU (cores)."""
    cpu_self = time.process_time()
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--probe-client", f"{api.base_url}{api.token}", llm.base_url, str(turns),
         str(concurrency)], capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=120, check=True)
    wall = time.perf_counter() - started
    result = json.loads(out.stdout)
    return turns / result["seconds"], (time.process_time() - cpu_self) / wall, result["client_cpu"] / result["seconds"]


# --- main -----------------------------------------------------------------------------------------
def listen_overflows() -> int:
    """The kernel's count of connections dropped because a listen queue was full (TcpExt ListenOverflows)."""
    with open("/proc/net/netstat", encoding="ascii") as f:
        lines = f.read().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split(), values.split(), strict=False)).get("ListenOverflows", 0))
    return 0


def bench(args: argparse.Namespace) -> None:
    if not args.stock_backlog:
        http.server.ThreadingHTTPServer.request_queue_size = WIDE_BACKLOG
    overflows = listen_overflows()
    rows: list[tuple[str, str, str]] = []
    all_rounds: dict[tuple[int, int], list[Round]] = {}
    with FakeTelegramAPI(username="bench_bot") as api, FakeOpenAIServer() as llm:
        llm.latency = args.latency
        if not args.skip_probe:
            for conc in sorted(set(args.max_concurrent)):
                n = max(600, int(conc / args.latency * 3))
                caps = [fakes_capacity(api, llm, n, conc) for _ in range(2)]
                cap = median(c[0] for c in caps)
                print(f"fakes alone, {conc} concurrent turns: {cap:.0f} turns/s "
                      f"(ideal {conc / args.latency:.0f}), fakes' CPU {median(c[1] for c in caps):.2f} cores, "
                      f"client CPU {median(c[2] for c in caps):.2f} cores",
                      flush=True)
                rows.append((f"fakes alone (no bot), {conc} concurrent", f"{cap:.0f} turns/s",
                             f"close to the ideal {conc / args.latency:.0f}"))
        first_chat = 1_000_000
        for conc in args.max_concurrent:
            ideal = conc / args.latency
            with tempfile.TemporaryDirectory(prefix="bench-conc-") as tmp:
                extra = {key: json.loads(value) for key, value in (item.split("=", 1) for item in args.set)}
                if args.profile:
                    bot = ProfiledBot(Path(tmp), Path(args.profile).resolve(),
                                      **settings(api, llm, conc, not args.no_stream), **extra)
                else:
                    bot = BotProcess(Path(tmp), **settings(api, llm, conc, not args.no_stream), **extra)
                bot.start(timeout=60)
                try:
                    # Warm-up: the first turns pay for lazy imports and connection set-up.
                    run_round(api, bot, 20, 900_000 + conc * 1000, args.timeout)
                    for rep in range(args.repeat):
                        for chats in args.chats:
                            r = run_round(api, bot, chats, first_chat, args.timeout)
                            first_chat += chats
                            all_rounds.setdefault((conc, chats), []).append(r)
                            if r.out_of_order or r.turns < chats * MESSAGES_PER_CHAT:
                                problems = [line for line in bot.log().splitlines()
                                            if " WARNING " in line or " ERROR " in line]
                                print("  bot log warnings/errors:\n    " + "\n    ".join(problems[-20:]), flush=True)
                            print(f"max_concurrent={conc} chats={chats} run {rep + 1}: {r.turns} turns in "
                                  f"{r.seconds:.2f} s = {r.rate:.0f} turns/s ({r.rate / ideal:.0%} of {ideal:.0f}); "
                                  f"out of order: {r.out_of_order}; bot CPU {r.bot_cpu:.2f} cores "
                                  f"({r.cpu_per_turn:.1f} ms a turn), fakes CPU {r.fakes_cpu:.2f} cores; "
                                  f"bot turn median {r.bot_turn_ms:.0f} ms", flush=True)
                finally:
                    code = bot.stop()
                    log = bot.log()
                if args.keep_log:
                    Path(args.keep_log).write_text(log, encoding="utf-8")
                if code != 0 or "Traceback" in log:
                    print(f"bot exited with {code}; log tail:\n{log[-3000:]}")
    print(f"\nlisten queue overflows during the benchmark: {listen_overflows() - overflows} "
          f"(backlog {http.server.ThreadingHTTPServer.request_queue_size})")
    print(f"\nsummary (medians over {args.repeat} runs; model latency {args.latency * 1000:.0f} ms):")
    for (conc, chats), rounds in all_rounds.items():
        ideal = conc / args.latency
        rate = median(r.rate for r in rounds)
        bad = sum(r.out_of_order for r in rounds)
        print(f"  max_concurrent={conc:<4} chats={chats:<4} {rate:6.0f} turns/s  {rate / ideal:4.0%} of ideal "
              f"{ideal:.0f}  (min {min(r.rate for r in rounds):.0f}, max {max(r.rate for r in rounds):.0f})  "
              f"order kept: {'yes' if bad == 0 else f'NO ({bad} chats)'}  bot CPU "
              f"{median(r.bot_cpu for r in rounds):.2f} ({median(r.cpu_per_turn for r in rounds):.1f} ms a turn)  "
              f"fakes CPU {median(r.fakes_cpu for r in rounds):.2f}  "
              f"bot turn p50 {median(r.bot_turn_ms for r in rounds):.0f} ms, "
              f"slowest run {percentile([r.seconds for r in rounds], 100):.2f} s")
        target = ">= 250 turns/s" if (conc, chats) == (64, 500) else "-"
        rows.append((f"{chats} chats x 3 msgs, {conc} concurrent, {args.latency * 1000:.0f} ms model",
                     f"{rate:.0f} turns/s ({rate / ideal:.0%} of {ideal:.0f}), order kept: "
                     f"{'yes' if bad == 0 else 'NO'}", target))
    print_table(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chats", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--max-concurrent", type=int, nargs="+", default=[64])
    parser.add_argument("--latency", type=float, default=0.2, help="model latency in seconds")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--skip-probe", action="store_true", help="do not measure the fakes alone")
    parser.add_argument("--no-stream", action="store_true", help="stream_replies false: whole answers")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                        help='another config.json key, e.g. --set memory_embedding_model=\'""\' (repeatable)')
    parser.add_argument("--stock-backlog", action="store_true",
                        help="keep the fakes' stdlib listen backlog of 5 (shows the fakes' bottleneck)")
    parser.add_argument("--profile", metavar="PATH",
                        help="run the bot under a profiler: PATH.pyisession = pyinstrument session "
                        "(pip install pyinstrument), else cProfile stats")
    parser.add_argument("--keep-log", metavar="PATH", help="save the bot's log here")
    parser.add_argument("--probe-client", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe_client:
        tg, oa, turns, conc = args.probe_client
        print(json.dumps(asyncio.run(_probe(tg, oa, int(turns), int(conc)))))
        return
    bench(args)


if __name__ == "__main__":
    main()
