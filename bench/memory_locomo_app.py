"""LoCoMo recall through the real ``app.py``: do the bot's own tools find the evidence of each question?

bench/memory_locomo.py stores the turns through the store directly; this drives the whole bot instead.
``python app.py`` runs as a subprocess (tests/fakes/bot_process.py) against the fake Telegram Bot API and the
fake OpenAI server, on SQLite by default (PostgreSQL with ``--db-url``), with the default memory settings
(``memory_embedding_model`` ``"local"``: the bundled model embeds every stored turn and every memory passage)
and ``agent_max_context_turns`` 10, so older turns are trimmed and summarised about every 10 turns.

Each LoCoMo conversation is one private Telegram chat (chat id 100000 + the conversation's number, session
``telegram:<chat id>``); the chats run in parallel, the turns of one chat strictly in order: the next dialog
turn is sent only when the bot has answered the one before. Each turn is the user's text message
"<speaker>: <text>" (an image turn: its text, the caption LoCoMo keeps, as bench/memory_locomo.py sends it).

The fake model:

- an ordinary turn gets a short acknowledgement, "ok, noted. [<tag>]", the tag a checksum of the user's
  message, so the driver knows which turn a reply answers (a reply sent twice after the restart is seen);
- a summary request (system prompt ``SUMMARY_SYSTEM_PROMPT``, summaries/text.py) keeps little: exactly ONE
  bullet, "- " followed by the first ``User:`` line of the part's transcript (that user message's text, e.g.
  "- Maria: Hey John! Long time no see!"); everything else in the part is dropped by the model (what the
  bot's own fact check puts back as ``- (kept) …`` lines is the product's doing, and is measured);
- a merge of part summaries (``MERGE_REQUEST``) keeps just the first two bullet lines of the parts.

Halfway (when half of all turns have been answered) the bot is killed with SIGKILL, with whatever turns of the
other chats are in flight, and started again on the same folder and database; the conversations continue.
When every turn is answered, the run waits until the background work has settled: no summary job pending,
every user and assistant message of the chats has its ``message_vectors`` row (the history indexer), and the
count of indexed memory passages (``memory_chunks``) has not changed for a few seconds. Then the bot is stopped
with SIGTERM.

Each question (categories 1-4, and 5 separately) is then asked through the bot's own tools, in this process:
the config file is loaded and every part built as ``app.py`` builds it (``bootstrap.compose.compose``, which
opens the same database and data folder and installs the plugins that register the tools with the memory
index and the history index), and the registered ``history_search`` and ``memory_search`` tools are called with
the question as the query and the chat's session as the calling session (as agent/loop.py calls a tool).

A question counts as found by a tool when the text of one of its evidence turns appears in the tool's returned
text. Both are normalised (whitespace collapsed to one space, case folded), and an evidence turn is present
when its first 50 characters (the whole text when shorter) appear; the speaker's name is not part of what is
looked for. A third table applies a stricter rule: an evidence turn counts when at least 80% of its content
words (memory_search's terms: stop words out) appear together in one passage of the output (a
``history_search`` hit with its neighbour lines, or one ``memory_search`` line). By the first rule,
"memory files" counts a question as held by the session's memory files on disk (every ``*.md`` file of its
memory folder: the daily summary files and MEMORY.md). Questions whose
evidence names no dialog turn of the conversation are left out (as bench/memory_locomo.py does). A second
table applies a looser rule, for what the first misses (a ``- (kept)`` line holds the user's sentence around
a fact, a ``history_search`` passage of a long message may start mid-message): an evidence turn is present
also when the first 50 characters of one of its sentences of 30 or more characters (normalised) appear.

The data is not part of the project: pass the path of LoCoMo's ``locomo10.json`` or a gzipped copy.

    python bench/memory_locomo_app.py PATH/locomo10.json[.gz] [--db-url URL] [--conversations N]
                                      [--questions N] [--keep DIR]
    python bench/memory_locomo_app.py PATH/locomo10.json[.gz] --ask-only DIR   (the questions again, of a kept run)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import statistics
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import bindparam, create_engine, text  # noqa: E402
from sqlalchemy.pool import NullPool  # noqa: E402

from agent.tools.base import ToolContext  # noqa: E402
from bench.memory_locomo import CATEGORIES, PASSAGE_SHARE, evidence_ids, in_one_passage, load, turns  # noqa: E402
from bootstrap.compose import compose  # noqa: E402
from bootstrap.preflight import lock_database  # noqa: E402
from config.settings import load_config, normalise_db_url  # noqa: E402
from summaries.text import MERGE_REQUEST, SUMMARY_SYSTEM_PROMPT  # noqa: E402
from tests.fakes.bot_process import BotProcess  # noqa: E402
from tests.fakes.http_server import KeepAliveHTTPServer  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer, message_text  # noqa: E402
from tests.fakes.telegram_api import FakeTelegramAPI  # noqa: E402

#: turns a chat keeps in its context: the older ones are trimmed (and summarised) about every 10 turns
CONTEXT_TURNS = 10
#: an evidence turn is present when this many of its first characters (normalised) appear
MATCH_CHARS = 50
#: the looser rule's shortest sentence (characters) that counts on its own
MIN_SENTENCE = 30
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
#: seconds without a change in the settled counts before the background work counts as done
QUIET_SECONDS = 5.0
FIRST_CHAT_ID = 100_000


def normalise(value: str) -> str:
    """Whitespace collapsed to one space, case folded."""
    return " ".join(value.split()).casefold()


def needle(turn_text: str) -> str:
    """What must appear for a turn to count as present: its first MATCH_CHARS characters, normalised."""
    return normalise(turn_text)[:MATCH_CHARS]


def sentence_needles(turn_text: str) -> list[str]:
    """The looser rule: the turn's needle, and that of each of its sentences of at least MIN_SENTENCE
    characters (a kept line or a passage may hold a later sentence of a turn without its start)."""
    sentences = [normalise(s) for s in SENTENCE_END.split(turn_text)]
    return [needle(turn_text)] + [s[:MATCH_CHARS] for s in sentences if len(s) >= MIN_SENTENCE]


def tag(message: str) -> str:
    """A short checksum of a user message (its last 200 characters, normalised), echoed in the reply."""
    return f"{zlib.crc32(normalise(message)[-200:].encode()):08x}"


class Model:
    """The fake model's answers (see the module's docstring), with a count of each kind of request."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def __call__(self, body: dict) -> str:
        messages = body["messages"]
        if message_text(messages[0]) == SUMMARY_SYSTEM_PROMPT:
            request = message_text(messages[1])
            if request.startswith(MERGE_REQUEST):
                self.count("merge")
                bullets = [line for line in request.splitlines() if line.startswith("- ")]
                return "\n".join(bullets[:2]) or "none"
            self.count("summary")
            users = [line for line in request.splitlines() if line.startswith("User: ")]
            return f"- {users[0][len('User: '):]}" if users else "none"
        self.count("turn")
        users = [m for m in messages if m.get("role") == "user"]
        return f"ok, noted. [{tag(message_text(users[-1]) if users else '')}]"


@dataclass
class Chat:
    """One conversation as a private chat: the texts to send, in order, and where it stands."""

    sample_id: str
    chat_id: int
    items: list[dict[str, Any]]
    texts: list[str]
    next: int = 0
    #: the tag of the reply awaited, or None
    waiting: str | None = None
    sent_at: float = 0.0
    #: turn index -> seconds from sending to its reply
    latency: list[float] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)

    @property
    def session_id(self) -> str:
        return f"telegram:{self.chat_id}"


def make_chats(data: list[dict[str, Any]]) -> list[Chat]:
    """One chat per conversation; the texts are "<speaker>: <text>"."""
    chats = []
    for n, conversation in enumerate(data):
        digits = "".join(ch for ch in conversation["sample_id"] if ch.isdigit())
        items = turns(conversation)
        chats.append(Chat(conversation["sample_id"], FIRST_CHAT_ID + (int(digits) if digits else n), items,
                          [f"{t['speaker']}: {t.get('text', '')}" for t in items]))
    return chats


@dataclass
class DriveResult:
    """What happened while the conversations were sent."""

    seconds: float = 0.0
    answered: int = 0
    #: bot messages that answered no awaited turn: (chat id, text)
    unexpected: list[tuple[int, str]] = field(default_factory=list)
    #: (chats with a turn in flight at the kill, seconds from the kill to "ready" again)
    restart: tuple[int, float] | None = None


def drive(api: FakeTelegramAPI, bot: BotProcess, chats: list[Chat], timeout: float) -> DriveResult:
    """Send every chat's turns, one at a time per chat; kill and restart the bot when half are answered."""
    result = DriveResult()
    total = sum(len(c.texts) for c in chats)
    by_id = {c.chat_id: c for c in chats}
    cursor = 0
    started = time.monotonic()

    def send_next(chat: Chat) -> None:
        message = chat.texts[chat.next]
        chat.waiting, chat.sent_at = tag(message), time.monotonic()
        api.push_text(chat.chat_id, message, user_id=chat.chat_id, first_name="LoCoMo")

    for chat in chats:
        send_next(chat)
    while any(c.waiting is not None for c in chats):
        try:
            api.wait_for_sent_sync(cursor + 1, timeout=1.0)
        except TimeoutError:
            pass
        new = api.sent[cursor:]
        cursor += len(new)
        for sent in new:
            chat = by_id.get(int(sent["chat_id"]))
            if chat is not None and chat.waiting is not None and f"[{chat.waiting}]" in str(sent["text"]):
                chat.latency.append(time.monotonic() - chat.sent_at)
                chat.waiting = None
                chat.next += 1
                result.answered += 1
            else:
                result.unexpected.append((int(sent["chat_id"]), str(sent["text"])))
        now = time.monotonic()
        for chat in chats:
            if chat.waiting is not None and now - chat.sent_at > timeout:
                print(f"  {chat.sample_id}: no reply to turn {chat.next} within {timeout:.0f} s; going on",
                      file=sys.stderr, flush=True)
                chat.missing.append(chat.next)
                chat.waiting = None
                chat.next += 1
        if result.restart is None and result.answered + sum(len(c.missing) for c in chats) >= total // 2:
            in_flight = sum(c.waiting is not None for c in chats)
            killed = time.monotonic()
            bot.kill()
            bot.start(timeout=120)
            result.restart = (in_flight, time.monotonic() - killed)
            print(f"  killed (SIGKILL) after {result.answered} of {total} turns, {in_flight} in flight; ready again "
                  f"in {result.restart[1]:.1f} s", flush=True)
            for chat in chats:  # a turn in flight keeps its send time: its reply comes after the restart
                if chat.waiting is not None:
                    chat.sent_at = time.monotonic()
        for chat in chats:
            if chat.waiting is None and chat.next < len(chat.texts):
                send_next(chat)
    result.seconds = time.monotonic() - started
    return result


def counts(engine: Any, sessions: list[str]) -> tuple[int, int, int, int]:
    """``(summary jobs not done, user/assistant messages without a vector, memory passages, summary jobs)``
    of the chats' sessions."""
    sids = bindparam("sids", expanding=True)
    with engine.connect() as conn:
        pending, jobs = conn.execute(text(
            "SELECT count(*) FILTER (WHERE status != 'done'), count(*) FROM summary_jobs WHERE session_id IN :sids"
        ).bindparams(sids), {"sids": sessions}).one()
        unindexed = conn.execute(text(
            "SELECT count(*) FROM messages m LEFT JOIN message_vectors v ON v.message_id = m.id "
            "WHERE m.session_id IN :sids AND m.role IN ('user', 'assistant') AND v.message_id IS NULL"
        ).bindparams(sids), {"sids": sessions}).scalar()
        chunks = conn.execute(text("SELECT count(*) FROM memory_chunks WHERE session_id IN :sids").bindparams(sids),
                              {"sids": sessions}).scalar()
    return int(pending), int(unindexed), int(chunks), int(jobs)


def settle(url: str, sessions: list[str], timeout: float) -> tuple[float, tuple[int, int, int, int]]:
    """Wait until no summary job is pending, every message has its vector and the passages stopped changing;
    return the seconds waited and the last counts."""
    engine = create_engine(url, poolclass=NullPool)
    started = time.monotonic()
    last, since = None, started
    try:
        while time.monotonic() - started < timeout:
            now = counts(engine, sessions)
            if now != last:
                last, since = now, time.monotonic()
            elif not now[0] and not now[1] and time.monotonic() - since >= QUIET_SECONDS:
                return since - started, now
            time.sleep(0.5)
        print(f"  not settled within {timeout:.0f} s: {last}", file=sys.stderr)
        return time.monotonic() - started, last  # type: ignore[return-value]
    finally:
        engine.dispose()


@dataclass
class Found:
    """One question's outcome under one rule."""

    category: int
    history: bool
    memory: bool
    files: bool


def present(wanted: list[str], output: str) -> bool:
    """True when one of the evidence needles appears in ``output`` (normalised)."""
    hay = normalise(output)
    return any(n in hay for n in wanted)


async def ask(config_path: Path, chats: list[Chat], data: list[dict[str, Any]], per_conversation: int,
              ) -> tuple[dict[str, list[Found]], dict[str, Any]]:
    """Build the bot's parts as app.py does and ask every question through its history_search and memory_search
    tools; also check what the sessions' stored messages and memory files hold."""
    cfg = load_config(config_path)
    lock_database(cfg)  # the bot is gone: this process alone on the SQLite file, as app.py would be
    parts = await compose(cfg, config_path, {})
    services = parts.services
    history_tool, memory_tool = services.tools.get("history_search"), services.tools.get("memory_search")
    assert history_tool is not None and memory_tool is not None, services.tools.names()
    found: dict[str, list[Found]] = {"strict": [], "sentences": [], "passage": []}
    info: dict[str, Any] = {"stored": Counter(), "files": Counter(), "times": defaultdict(list),
                            "chars": defaultdict(list)}
    try:
        for chat, conversation in zip(chats, data, strict=True):
            sid = chat.session_id
            # every sent turn stored once, in order?
            stored = [m.message for m in await services.store.sessions.load_messages(sid)]
            users = [message_text(m) for m in stored if m.get("role") == "user"]
            stored_texts = [normalise(u) for u in users]  # the bot strips a message's outer whitespace
            sent_texts = [normalise(t) for t in chat.texts]
            have, sent = Counter(stored_texts), Counter(sent_texts)
            info["stored"]["turns sent"] += len(chat.texts)
            info["stored"]["user messages stored"] += len(users)
            info["stored"]["turns not stored"] += sum((sent - have).values())
            info["stored"]["user messages stored more than sent"] += sum((have - sent).values())
            info["stored"]["sessions stored out of order"] += int(
                [u for u in stored_texts if u in sent] != [t for t in sent_texts if t in have])
            folder = services.memory.session_dir(sid)
            files = sorted(folder.glob("*.md")) if folder.is_dir() else []
            on_disk = "\n".join(p.read_text(encoding="utf-8") for p in files)  # noqa: ASYNC240 - the bot is stopped
            lines = [line for line in on_disk.splitlines() if line.startswith("- ")]
            info["files"]["files"] += len(files)
            info["files"]["bullet lines"] += len(lines)
            info["files"]["(kept) lines"] += sum("(kept)" in line for line in lines)
            info["files"]["(fallback) lines"] += sum("(fallback)" in line for line in lines)
            info["files"]["characters"] += len(on_disk)
            texts = {t["dia_id"]: t.get("text", "") for t in chat.items}
            searcher = services.memory_search
            if searcher is not None and hasattr(searcher, "refreshed"):
                # the files are new to this process: their passages missing from the index are embedded in the
                # background after a first search (memory/search.py); the questions are asked of the settled index
                await memory_tool.call(ToolContext(session_id=sid, config=services.config(),
                                                   data_dir=services.config().data_path()), {"query": "warm up"})
                await searcher.refreshed(sid)
            asked = 0
            for qa in conversation["qa"]:
                evidence = [texts[d] for d in sorted(evidence_ids(qa)) if d in texts]
                if not evidence:
                    continue
                if per_conversation and asked >= per_conversation:
                    break
                asked += 1
                ctx = ToolContext(session_id=sid, config=services.config(), data_dir=services.config().data_path())
                out = {}
                for name, tool in (("history", history_tool), ("memory", memory_tool)):
                    started = time.perf_counter()
                    out[name] = await tool.call(ctx, {"query": qa["question"]})
                    info["times"][name].append((time.perf_counter() - started) * 1000)
                    info["chars"][name].append(len(out[name]))
                for rule, needles in (("strict", [needle(e) for e in evidence]),
                                      ("sentences", [n for e in evidence for n in sentence_needles(e)])):
                    found[rule].append(Found(int(qa["category"]), present(needles, out["history"]),
                                             present(needles, out["memory"]), present(needles, on_disk)))
                found["passage"].append(Found(int(qa["category"]), in_one_passage(evidence, out["history"], "history"),
                                              in_one_passage(evidence, out["memory"], "memory"),
                                              present([needle(e) for e in evidence], on_disk)))
    finally:
        if services.plugins is not None:
            await services.plugins.stopping()
        await services.llm.close()
        await services.locks.close()
        await services.store.close()
    return found, info


def sizes(info: dict[str, Any]) -> str:
    """The tools' output characters: median, p90 and max of each."""
    return "; ".join(f"{name}_search output characters median {statistics.median(c):,.0f}, p90 "
                     f"{statistics.quantiles(c, n=10)[-1]:,.0f}, max {max(c):,}" for name, c in info["chars"].items())


def report(found: list[Found]) -> None:
    """The table: per category and categories 1-4 together."""
    def share(rows: list[Found], test: Any) -> str:
        return f"{sum(1 for r in rows if test(r)) / len(rows):8.0%}" if rows else f"{'-':>8s}"

    print(f"{'category':22s} {'questions':>9s} {'history_search':>15s} {'memory_search':>14s} {'either':>8s} "
          f"{'memory files':>13s}")

    def row(title: str, rows: list[Found]) -> None:
        print(f"{title:22s} {len(rows):9d} {share(rows, lambda r: r.history):>15s} "
              f"{share(rows, lambda r: r.memory):>14s} {share(rows, lambda r: r.history or r.memory):>8s} "
              f"{share(rows, lambda r: r.files):>13s}")

    for cat in (1, 2, 3, 4):
        row(f"{cat} {CATEGORIES[cat]}", [f for f in found if f.category == cat])
    row("1-4 together", [f for f in found if f.category in (1, 2, 3, 4)])
    five = [f for f in found if f.category == 5]
    if five:
        row(f"5 {CATEGORIES[5]} (apart)", five)


def bot_settings(api: FakeTelegramAPI, llm: FakeOpenAIServer, db_url: str) -> dict[str, Any]:
    """config.json: the default memory settings (the local embedding model), 10 turns of context."""
    return {"channel_type": "telegram", "telegram_bot_token": api.token, "telegram_base_url": api.base_url,
            "telegram_rate_limit": False, "open_ai_api_base": llm.base_url, "open_ai_api_key": "bench",
            "model_max_parallel": 1000,  # the fake stands in for a remote provider: no one-slot limit
            "data_dir": "data", "db_url": db_url, "stream_replies": False,
            "agent_max_context_turns": CONTEXT_TURNS}


def log_problems(folder: Path) -> list[str]:
    """ERROR and WARNING lines and tracebacks of every run's log."""
    out = []
    for path in sorted(folder.glob("stderr.*.txt")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if " ERROR " in line or " WARNING " in line or "Traceback" in line:
                out.append(f"{path.name}: {line}")
    return out


def ask_again(args: argparse.Namespace, data: list[dict[str, Any]], chats: list[Chat]) -> int:
    """``--ask-only DIR``: ask the questions again of a folder a run kept (``--keep``), e.g. after a change to
    the search; the conversations are not driven again."""
    config_path = Path(args.ask_only).resolve() / "config.json"
    started = time.monotonic()
    results, info = asyncio.run(ask(config_path, chats, data, args.questions))
    print(f"asked again in {config_path.parent}: {time.monotonic() - started:.0f} s (history_search median "
          f"{statistics.median(info['times']['history']):.0f} ms, memory_search median "
          f"{statistics.median(info['times']['memory']):.0f} ms)")
    print(sizes(info))
    print(f"\nfound when the first {MATCH_CHARS} characters of an evidence turn (normalised) appear in the output:")
    report(results["strict"])
    print(f"\nlooser: also when the first {MATCH_CHARS} characters of one of its sentences of {MIN_SENTENCE} or more "
          "characters appear:")
    report(results["sentences"])
    print(f"\nstricter: when {PASSAGE_SHARE:.0%} of an evidence turn's content words appear together in one passage "
          "(a history_search hit with its neighbours, a memory_search line; the files column as the first rule):")
    report(results["passage"])
    return 0


def run(args: argparse.Namespace) -> int:
    """Drive, settle, stop, ask, report."""
    data = load(Path(args.path))[:args.conversations or None]
    chats = make_chats(data)
    if args.ask_only:
        return ask_again(args, data, chats)
    keep = Path(args.keep).resolve() if args.keep else None
    with FakeTelegramAPI(username="locomo_bot") as api, FakeOpenAIServer() as llm, \
            tempfile.TemporaryDirectory(prefix="locomo-app-") as tmp:
        model = Model()
        llm.responder = model
        folder = keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        bot = BotProcess(folder, **bot_settings(api, llm, args.db_url))
        total = sum(len(c.texts) for c in chats)
        print(f"{len(chats)} conversations, {total} turns, database {'PostgreSQL' if args.db_url else 'SQLite'}, "
              f"agent_max_context_turns {CONTEXT_TURNS}, memory_embedding_model local; folder {folder}", flush=True)
        bot.start(timeout=120)
        driven = drive(api, bot, chats, args.timeout)
        print(f"driving the conversations: {driven.seconds:.0f} s ({driven.answered} of {total} turns answered, "
              f"median reply {statistics.median(x for c in chats for x in c.latency) * 1000:.0f} ms)", flush=True)
        url = normalise_db_url(args.db_url, folder / "data")
        settled, (pending, unindexed, chunks, jobs) = settle(url, [c.session_id for c in chats], args.settle)
        print(f"indexing settling: {settled:.0f} s ({jobs} summary jobs, {pending} pending; {unindexed} messages "
              f"without a vector; {chunks} memory passages indexed)", flush=True)
        code = bot.stop(timeout=60)
        print(f"bot stopped with SIGTERM: exit code {code}; model requests: "
              + ", ".join(f"{k} {v}" for k, v in sorted(model.counts.items())), flush=True)
        problems = log_problems(folder)
        started = time.monotonic()
        results, info = asyncio.run(ask(bot.config_path, chats, data, args.questions))
        asking = time.monotonic() - started
    missing = sum(len(c.missing) for c in chats)
    print(f"replies missing (timed out): {missing}; bot messages that answered no awaited turn: "
          f"{len(driven.unexpected)}")
    by_id = {c.chat_id: c for c in chats}
    for chat_id, txt in driven.unexpected[:10]:
        chat = by_id.get(chat_id)
        again = [i for i, t in enumerate(chat.texts[:chat.next]) if f"[{tag(t)}]" in txt] if chat else []
        what = f"the reply to turn {again[-1] + 1} of {chat.sample_id} again" if again else "not a reply to a turn"
        print(f"    chat {chat_id}: {txt[:160]!r} ({what})")
    if driven.restart is not None:
        print(f"restart: {driven.restart[0]} turns in flight at the SIGKILL, ready again in {driven.restart[1]:.1f} s")
    print("stored: " + ", ".join(f"{k} {v}" for k, v in info["stored"].items()))
    print("memory files: " + ", ".join(f"{k} {v:,}" for k, v in info["files"].items()))
    print(f"log lines with ERROR, WARNING or a traceback: {len(problems)}")
    for line in problems[:10]:
        print(f"    {line[:300]}")
    found = results["strict"]
    print(f"asking {len(found)} questions: {asking:.0f} s (history_search median "
          f"{statistics.median(info['times']['history']):.0f} ms, memory_search median "
          f"{statistics.median(info['times']['memory']):.0f} ms)")
    print(sizes(info))
    print(f"\nfound when the first {MATCH_CHARS} characters of an evidence turn (normalised) appear in the output:")
    report(found)
    print(f"\nlooser: also when the first {MATCH_CHARS} characters of one of its sentences of {MIN_SENTENCE} or more "
          "characters appear:")
    report(results["sentences"])
    print(f"\nstricter: when {PASSAGE_SHARE:.0%} of an evidence turn's content words appear together in one passage "
          "(a history_search hit with its neighbours, a memory_search line; the files column as the first rule):")
    report(results["passage"])
    return 0


def quiet_resets() -> None:
    """The fakes' servers print a traceback for every connection the killed bot left (connection reset by
    peer): leave those out of the output."""
    original = KeepAliveHTTPServer.handle_error

    def handle_error(self: KeepAliveHTTPServer, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionResetError | BrokenPipeError):
            original(self, request, client_address)

    KeepAliveHTTPServer.handle_error = handle_error  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="LoCoMo's locomo10.json (or a .json.gz of the same shape)")
    parser.add_argument("--db-url", default="", help="a PostgreSQL URL (default: SQLite in the bot's data folder)")
    parser.add_argument("--conversations", type=int, default=0, help="only the first N conversations (0: all)")
    parser.add_argument("--questions", type=int, default=0, help="only the first N questions of each (0: all)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for one turn's reply")
    parser.add_argument("--settle", type=float, default=1200.0, help="seconds to wait for the background work")
    parser.add_argument("--keep", default="", help="a folder for the bot's files (config, data, logs), kept")
    parser.add_argument("--ask-only", default="", metavar="DIR",
                        help="only ask the questions again, of the folder a run kept with --keep")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    quiet_resets()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
