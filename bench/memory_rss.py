"""The bot's memory (RSS) with the local embedding model loaded, at 200 active chats.

``python app.py`` runs as a subprocess against the fake Bot API and the fake OpenAI server, with
``memory_embedding_model`` ``"local"`` and again ``""`` (off), interleaved. Every chat sends a few turns;
the long chats send more than ``agent_max_context_turns``, so trims summarise the dropped turns into daily
memory files, which the index chunks and embeds; the long chats then ask a question that the fake model
answers with a ``memory_search`` call. The process's ``VmRSS`` (and peak ``VmHWM``) is read from
``/proc/<pid>/status`` when it is ready, after its first reply (the token counter is loaded by then),
after the first long chat's summaries were indexed (the embedding model is loaded by then), and once every
chat has its replies and the background summaries and indexing have settled.

    python bench/memory_rss.py [--chats 200] [--runs 3] [--photos 20]

With ``--photos N``, N of the chats (spread over them) open with a photo (1280 x 960, as Telegram sends a
phone's photo; noise, so it does not compress away) and a caption instead of their first line: the bot
fetches it, keeps it as a file, sends it in that turn and describes it (DESIGN §5.1).

Goal: <= 200 MB at 200 active chats with the local model (architecture issue 26, step 8).
"""

from __future__ import annotations

import argparse
import http.server
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent.images import DESCRIBE_PROMPT  # noqa: E402
from summaries.text import MERGE_REQUEST, SUMMARY_SYSTEM_PROMPT  # noqa: E402
from tests.fakes.bot_process import BotProcess  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer, message_text  # noqa: E402
from tests.fakes.telegram_api import FakeTelegramAPI  # noqa: E402

#: turns a chat keeps in its context; the long chats send more, so their older turns are trimmed
CONTEXT_TURNS = 4
LONG_TURNS = 9
SHORT_TURNS = 3
QUESTION = "what did I tell you about my plans?"
WORDS = ("meeting", "budget", "train", "Berlin", "report", "garden", "recipe", "ticket", "doctor", "plan",
         "invoice", "python", "holiday", "school", "weather", "price", "call", "email", "friend", "book",
         "会议", "预算", "火车", "花园", "医生", "假期", "学校", "天气", "朋友", "书")
STATUS_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile")
#: The fakes' listen backlog: the stdlib's 5 drops SYNs when 64 turns connect at once (bench/concurrency.py).
WIDE_BACKLOG = 1024


def proc_status(pid: int) -> dict[str, float]:
    """The process's memory lines from ``/proc/<pid>/status``, in MB."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in STATUS_FIELDS:
            out[key] = int(value.split()[0]) / 1024
    return out


def responder(body: dict) -> dict | str:
    """The fake model: summaries list the user's lines; the question gets a memory_search call, then an answer."""
    messages = body["messages"]
    if DESCRIBE_PROMPT in message_text(messages[0]):
        return "a photo of grey noise, like an old television"
    if message_text(messages[0]) == SUMMARY_SYSTEM_PROMPT:
        text = message_text(messages[1])
        if text.startswith(MERGE_REQUEST):
            return "\n".join(line for line in text.splitlines() if line.startswith("- ")) or "none"
        return "\n".join(f"- The user said {line[6:]}" for line in text.splitlines() if line.startswith("User: "))
    last = messages[-1]
    if last.get("role") == "tool":
        return "Here is what I found."
    if last.get("role") == "user" and message_text(last) == QUESTION:
        return {"content": None, "tool_calls": [{"id": f"call_{len(messages)}", "type": "function", "function": {
            "name": "memory_search", "arguments": json.dumps({"query": "plans budget holiday"})}}]}
    return "ok, noted."


def line_for(rng: random.Random, chat: int, turn: int) -> str:
    """A user's line: a few sentences, different in every chat and turn."""
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 30)))
    return f"c{chat} t{turn}: I keep thinking about {words}."


def settings(api: FakeTelegramAPI, llm: FakeOpenAIServer, model: str, db_url: str) -> dict:
    """The bot's config.json."""
    return {"channel_type": "telegram", "telegram_bot_token": api.token, "telegram_base_url": api.base_url,
            "telegram_rate_limit": False, "open_ai_api_base": llm.base_url, "open_ai_api_key": "bench",
            "model_max_parallel": 1000,  # the fake stands in for a remote provider: no one-slot limit
            "data_dir": "data", "db_url": db_url, "stream_replies": False, "memory_embedding_model": model,
            "agent_max_context_turns": CONTEXT_TURNS}


def chunk_count(folder: Path) -> tuple[int, int, int, int]:
    """``(passages indexed, passages with a vector, summary jobs not done, turns indexed)`` in the bot's SQLite
    file (the turns: memory/history_index.py, whose catching up is part of settling)."""
    db = sqlite3.connect(f"file:{folder / 'data' / 'chatbot.db'}?mode=ro", uri=True, timeout=10)
    try:
        chunks, vectors = db.execute("SELECT count(*), count(vector) FROM memory_chunks").fetchone()
        turns = db.execute("SELECT count(*) FROM message_vectors").fetchone()[0]
        pending = db.execute("SELECT count(*) FROM summary_jobs WHERE status != 'done'").fetchone()[0]
    finally:
        db.close()
    return chunks, vectors, pending, turns


def settle(folder: Path, quiet: float = 3.0, timeout: float = 180.0) -> tuple[int, int]:
    """Wait until no summary job is pending and the index stopped growing; return the passage counts."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        chunks, vectors, pending, turns = chunk_count(folder)
        if (chunks, vectors, pending, turns) != last:
            last, since = (chunks, vectors, pending, turns), time.monotonic()
        elif not pending and time.monotonic() - since >= quiet:
            break
        time.sleep(0.25)
    return last[0], last[1]


def photo_bytes() -> bytes:
    """A 1280 x 960 JPEG of noise (Telegram's size for a phone's photo; noise keeps it about 1 MB)."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.effect_noise((1280, 960), 64).convert("RGB").save(out, "JPEG", quality=85)
    return out.getvalue()


def converse(api: FakeTelegramAPI, chats: list[int], turns: dict[int, int], done: dict[int, int],
             rng: random.Random, timeout: float, ask: tuple[int, ...] = (), photos: set[int] = frozenset(),
             photo: bytes = b"") -> None:
    """Round by round, the next turn of every chat in ``chats`` that has one left (``done``: turns sent so
    far, updated), until each has sent ``turns[chat]``; then the question of the chats in ``ask``."""
    while True:
        active = [c for c in chats if done[c] < turns[c]]
        if not active:
            break
        before = len(api.sent)
        for c in active:
            if c in photos and done[c] == 0:
                api.push_photo(c, photo, user_id=c, first_name=f"U{c}", caption=line_for(rng, c, 0),
                               width=1280, height=960)
            else:
                api.push_text(c, line_for(rng, c, done[c]), user_id=c, first_name=f"U{c}")
            done[c] += 1
        api.wait_for_sent_sync(before + len(active), timeout=timeout)
    if ask:
        before = len(api.sent)
        for c in ask:
            api.push_text(c, QUESTION, user_id=c, first_name=f"U{c}")
        api.wait_for_sent_sync(before + len(ask), timeout=timeout)


def run(model: str, chats: int, seed: int, timeout: float, keep: str = "",
        photos: int = 0) -> dict[str, dict[str, float] | float]:
    """One bot process; the memory figures at each phase. ``keep``: a folder for the bot's files, kept."""
    rng = random.Random(seed)
    first = 10_000
    ids = list(range(first, first + chats))
    turns = {c: LONG_TURNS if i % 2 == 0 else SHORT_TURNS for i, c in enumerate(ids)}
    long_chats = [c for c in ids if turns[c] == LONG_TURNS]
    with_photo = set(ids[:: max(1, chats // photos)][:photos]) if photos else set()
    photo = photo_bytes() if photos else b""
    out: dict[str, dict[str, float] | float] = {}
    with FakeTelegramAPI(username="rss_bot") as api, FakeOpenAIServer() as llm, \
            tempfile.TemporaryDirectory() as tmp:
        llm.responder = responder
        folder = Path(keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        bot = BotProcess(folder, **settings(api, llm, model, "")).start(timeout=60)
        assert bot.proc is not None
        pid = bot.proc.pid
        time.sleep(0.2)
        out["ready"] = proc_status(pid)
        done = dict.fromkeys(ids, 0)
        # a first turn waits for the token counter, which loads in the background after "ready"
        converse(api, ids[:1], {ids[0]: 1}, done, rng, timeout, photos=with_photo, photo=photo)
        out["first reply"] = proc_status(pid)
        # the rest of one long chat: its trims are summarised and indexed, which loads the embedding model
        converse(api, ids[:1], turns, done, rng, timeout, photos=with_photo, photo=photo)
        settle(folder)
        if model:
            bot.wait_for_log("local embedding model loaded", timeout=60)
        out["first summary indexed"] = proc_status(pid)
        started = time.perf_counter()
        converse(api, ids, turns, done, rng, timeout, ask=tuple(long_chats), photos=with_photo, photo=photo)
        out["seconds"] = time.perf_counter() - started
        chunks, vectors = settle(folder)
        out[f"{chats} chats"] = proc_status(pid)
        out["passages"], out["vectors"] = float(chunks), float(vectors)
        out["photos kept"] = float(len(list((folder / "data" / "media").glob("*/*.jpg"))))
        assert bot.stop() == 0
        errors = [line for line in bot.log().splitlines() if " ERROR " in line or "Traceback" in line]
        if errors:
            print("  bot errors:", *errors[:5], sep="\n    ", file=sys.stderr)
    return out


def main() -> None:
    """Command line: runs with the model on and off, interleaved; medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for one round's replies")
    parser.add_argument("--photos", type=int, default=0, help="chats that open with a photo")
    parser.add_argument("--keep", default="", help="keep the bot's folders (data, logs) under this folder")
    args = parser.parse_args()
    http.server.ThreadingHTTPServer.request_queue_size = WIDE_BACKLOG
    results: dict[str, list[dict]] = {"local": [], "": []}
    for r in range(args.runs):
        for model in ("local", ""):
            keep = str(Path(args.keep) / f"{model or 'off'}-{r + 1}") if args.keep else ""
            got = run(model, args.chats, seed=r, timeout=args.timeout, keep=keep, photos=args.photos)
            results[model].append(got)
            print(f"run {r + 1}, model {model or 'off'}: " + "; ".join(
                f"{phase} {v['VmRSS']:.0f} MB (peak {v['VmHWM']:.0f})" if isinstance(v, dict) else f"{phase} {v:.0f}"
                for phase, v in got.items()), flush=True)
    phases = [k for k, v in results["local"][0].items() if isinstance(v, dict)]
    print(f"\nmedians of {args.runs} runs ({args.chats} chats, half of them trimmed), MB:")
    print(f"  {'phase':24s} {'model':>6s} {'RSS':>6s} {'peak':>6s} {'anon':>6s} {'file':>6s}")
    for phase in phases:
        for model in ("local", ""):
            rows = [run_[phase] for run_ in results[model]]
            med = {f: statistics.median(row[f] for row in rows) for f in STATUS_FIELDS}
            print(f"  {phase:24s} {model or 'off':>6s} {med['VmRSS']:6.0f} {med['VmHWM']:6.0f} "
                  f"{med['RssAnon']:6.0f} {med['RssFile']:6.0f}")
    for model in ("local", ""):
        runs = results[model]
        print(f"  model {model or 'off'}: {statistics.median(r['passages'] for r in runs):.0f} passages indexed, "
              f"{statistics.median(r['vectors'] for r in runs):.0f} with vectors; conversation "
              f"{statistics.median(r['seconds'] for r in runs):.1f} s")


if __name__ == "__main__":
    main()
