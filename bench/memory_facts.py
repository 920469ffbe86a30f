"""Facts that survive a lossy summariser: 300 turns in English and Chinese with 90 planted facts, through app.py.

The real app (``python app.py``, terminal channel, stdin piped) talks to the fake OpenAI server on loopback.
Its summariser deliberately drops half of the planted facts and invents one per summary. The conversation
runs in three processes (two restarts) with ``agent_max_context_turns`` 20. At the end it reports the share
of planted facts (a) in the context or the injected summary, (b) in the memory files (of all facts, and of
the facts that left the context: the last turns are still in it), (b') of those dropped, the share in the
memory files without the summary check's ``(kept)`` lines (what a bot without the check would keep), and the
check's kept share from the log, and (c) the share found by ``history_search`` with a natural question per
kind of fact (ten results, as the tool returns).

    python bench/memory_facts.py [--turns 300] [--keep]
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from summaries.text import MERGE_REQUEST, SUMMARY_SYSTEM_PROMPT  # noqa: E402
from tests.fakes.bot_process import clean_env  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer, message_text  # noqa: E402

EN_NAMES = ["Zephyra", "Quillon", "Marivel", "Tobiah", "Oriel", "Saskia", "Benedek", "Ilsabet", "Corvin",
            "Ottoline"]
EN_CITIES = ["Lisbon", "Tallinn", "Porto", "Ghent", "Bergen", "Lyon", "Kraków", "Seville", "Utrecht", "Graz"]
ZH_NAMES = ["王小明", "李静怡", "张伟东", "刘芳菲", "陈志强", "杨雪梅", "赵子龙", "黄晓婷", "周建国", "吴美玲"]
ZH_CITIES = ["杭州", "成都", "西安", "厦门", "青岛", "昆明", "苏州", "大连", "长沙", "南京"]
FILLERS = ["Tell me a short joke.", "What is a good name for a plant?", "How are you today?",
           "Explain recursion in one line.", "ok thanks", "今天天气怎么样？", "给我讲个笑话吧。", "谢谢，好的。",
           "Any tips for sleeping better?", "推荐一本书吧。"]
INVENTED = "- The user is going to the party tomorrow"
ZH_DISTRICTS = ["杭州西湖区", "成都武侯区", "西安雁塔区", "厦门思明区", "青岛市南区", "昆明五华区", "苏州姑苏区",
                "大连中山区", "长沙岳麓区", "南京鼓楼区"]
ZH_EMPLOYERS = ["阿里巴巴", "腾讯", "华为", "京东", "美团", "字节跳动", "百度", "小米", "网易", "携程"]
EN_JOBS = ["nurse at the city hospital", "baker at a small bakery", "teacher at the primary school",
           "driver for the bus company", "cook at a noodle bar", "clerk at the post office",
           "gardener at the botanical garden", "mechanic at a bike shop", "pharmacist at the corner pharmacy",
           "librarian at the public library"]
#: The kinds planted since the check learnt statements about the user (DESIGN §3): Chinese places and employers,
#: and lowercase English jobs; the other kinds are names, cities and numbers.
NEW_KINDS = (6, 7, 8)


#: A natural question for each kind of planted fact, in the order planted_facts() plants them.
QUESTIONS = ["who is my best friend at work?", "where do I fly next month for the conference?",
             "what is my gym locker code?", "我的朋友叫什么？", "我下个月住在哪里？", "我的房间号是多少？",
             "我家住在哪个区？", "我在哪家公司工作？", "what is my job?"]


def planted_facts() -> list[tuple[str, str]]:
    """90 (sentence, key) pairs: the key is what must survive (a name, a city, a number, a place, an employer,
    a job)."""
    facts: list[tuple[str, str]] = []
    for i in range(10):
        facts.append((f"My colleague {EN_NAMES[i]} is my best friend at work.", EN_NAMES[i]))
        facts.append((f"Next month I fly to {EN_CITIES[i]} for a conference.", EN_CITIES[i]))
        facts.append((f"My locker code at the gym is {4100 + 37 * i}.", str(4100 + 37 * i)))
        facts.append((f"我的朋友叫{ZH_NAMES[i]}，我们经常见面。", ZH_NAMES[i]))
        facts.append((f"我下个月住在{ZH_CITIES[i]}。", ZH_CITIES[i]))
        facts.append((f"我的房间号是{700 + 13 * i}号。", str(700 + 13 * i)))
        facts.append((f"我住在{ZH_DISTRICTS[i]}。", ZH_DISTRICTS[i]))
        facts.append((f"我在{ZH_EMPLOYERS[i]}工作。", ZH_EMPLOYERS[i]))
        facts.append((f"i work as a {EN_JOBS[i]}", EN_JOBS[i]))
    return facts


def script(turns: int) -> list[str]:
    """The user's lines: a planted fact every third turn, fillers in between."""
    facts = planted_facts()
    lines = []
    for t in range(turns):
        if t % 3 == 0 and t // 3 < len(facts):
            lines.append(facts[t // 3][0])
        else:
            lines.append(FILLERS[t % len(FILLERS)])
    return lines


def lossy_summariser(body: dict) -> str | None:
    """The fake model: chat requests get "ok"; summaries drop half of the facts and invent one."""
    messages = body["messages"]
    if message_text(messages[0]) != SUMMARY_SYSTEM_PROMPT:
        return "Noted, thanks for telling me."
    text = message_text(messages[1])
    if text.startswith(MERGE_REQUEST):
        return "\n".join(line for line in text.splitlines() if line.startswith("- ")) or "none"
    keys = [key for _, key in planted_facts()]
    bullets = []
    for line in text.splitlines():
        if not line.startswith("User: "):
            continue
        key = next((k for k in keys if k in line), None)
        if key is None:
            continue  # chit-chat is dropped, as the prompt asks
        if zlib.crc32(key.encode()) % 2:  # deliberately lose half of the facts
            continue
        bullets.append(f"- The user mentioned {key}")
    return "\n".join([*bullets, INVENTED])


def run_app(folder: Path, lines: list[str]) -> float:
    """One process: pipe ``lines`` to the terminal channel until EOF; return its wall time."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), "--config", str(folder / "config.json")],
                          input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=1800,
                          cwd=folder, env=clean_env())
    if proc.returncode != 0 or "Traceback" in proc.stderr:
        raise SystemExit(f"app.py failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started


def share(keys: list[str], text: str) -> float:
    """The share of ``keys`` found in ``text``."""
    return sum(1 for k in keys if k in text) / len(keys)


def measure(folder: Path) -> dict[str, float]:
    """The shares of planted facts in the context or summary, the memory files, and the check's figures."""
    keys = [key for _, key in planted_facts()]
    db = sqlite3.connect(folder / "data" / "chatbot.db")
    try:
        summary, start = db.execute("SELECT summary, context_start_seq FROM sessions "
                                    "WHERE session_id = 'terminal:local'").fetchone()
        context = [c for (c,) in db.execute("SELECT content FROM messages WHERE session_id = 'terminal:local' "
                                            "AND seq >= ? ORDER BY seq", (start,))]
        dropped = [c for (c,) in db.execute("SELECT content FROM messages WHERE session_id = 'terminal:local' "
                                            "AND seq < ? AND role = 'user'", (start,))]
    finally:
        db.close()
    in_context = (summary or "") + "\n" + "\n".join(context)
    # the facts that left the context: only these can be expected in the memory files
    left = [k for k in keys if any(k in json.loads(c)["content"] for c in dropped)]
    kinds = len(QUESTIONS)
    new = {key for i, (_, key) in enumerate(planted_facts()) if i % kinds in NEW_KINDS}
    memory = folder / "data" / "memory" / "terminal_local"
    files = "\n".join(p.read_text(encoding="utf-8") for p in sorted(memory.glob("????-??-??.md")))
    without_kept = "\n".join(line for line in files.splitlines() if "(kept)" not in line)
    log = (folder / "data" / "bot.log").read_text(encoding="utf-8")
    found = total = 0
    for m in re.finditer(r"summary check, job \d+ \(session [^)]*\): the \w+ kept (\d+) of (\d+) facts", log):
        found, total = found + int(m.group(1)), total + int(m.group(2))
    return {
        "context_or_summary": share(keys, in_context),
        "memory_files_of_all": share(keys, files),
        "memory_files_of_those_dropped": share(left, files),
        "memory_files_without_check": share(left, without_kept),
        "new_kinds_of_those_dropped": share([k for k in left if k in new], files),
        "check_kept_share": found / total if total else 1.0,
        "invented_lines_in_files": files.count(INVENTED),
        "sections": files.count("\n## "),
    }


def history_recall(folder: Path) -> float:
    """(c): the share of planted facts whose key is among history_search's results for its natural question."""
    import asyncio

    from store.store import Store

    async def run() -> float:
        store = Store(f"sqlite:///{folder / 'data' / 'chatbot.db'}", create_tables=False)
        await store.open()
        try:
            found = 0
            facts = planted_facts()
            for i, (_, key) in enumerate(facts):
                hits = await store.sessions.search_history("terminal:local", QUESTIONS[i % len(QUESTIONS)], 10)
                found += any(key in hit.passage for hit in hits)
            return found / len(facts)
        finally:
            await store.close()

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    """Run the scripted conversation in three processes and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--keep", action="store_true", help="keep the data folder and print its path")
    args = parser.parse_args(argv)
    lines = script(args.turns)
    with FakeOpenAIServer() as server:
        server.responder = lossy_summariser
        folder = Path(tempfile.mkdtemp(prefix="memory-facts-"))
        (folder / "config.json").write_text(json.dumps({
            "open_ai_api_base": server.base_url, "open_ai_api_key": "test", "model": "gpt-4o-mini",
            "agent_max_context_turns": 20, "data_dir": "data", "memory_embedding_model": "",
            "channel_type": "terminal"}), encoding="utf-8")
        third = len(lines) // 3
        walls = [run_app(folder, part) for part in (lines[:third], lines[third:2 * third], lines[2 * third:])]
    figures = measure(folder)
    figures["history_search_natural_question"] = history_recall(folder)
    print(f"turns {len(lines)}, planted facts {len(planted_facts())}, processes 3, wall {sum(walls):.1f} s")
    for name, value in figures.items():
        print(f"{name:30s} {value:.0%}" if isinstance(value, float) else f"{name:30s} {value}")
    if args.keep:
        print(f"data folder: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
