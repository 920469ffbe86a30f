"""Semantic memory: recall@5 of memory_search (keywords only vs hybrid), embedding cost, search latency, RSS.

60 facts (30 English, 30 Chinese) are indexed in one session; each is asked back with a paraphrase that
shares no content word with it. Then 10,000 passages are indexed in one session and searched.

    python bench/memory_recall.py [--chunks 10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from memory.daily import DailyMemory  # noqa: E402
from memory.embeddings import LocalEmbedder  # noqa: E402
from memory.index import MemoryIndex  # noqa: E402
from memory.search import MemorySearch  # noqa: E402
from store.store import Store  # noqa: E402

logger = logging.getLogger(__name__)

# (fact, question that shares no content word with it)
FACTS_EN = [
    ("My cat is called Tom.", "What is the name of my pet?"),
    ("I work as a nurse at the city hospital.", "What is my job?"),
    ("My daughter Emma turns seven in June.", "How old will my child be this summer?"),
    ("I am allergic to peanuts.", "Which food makes me sick?"),
    ("We fly to Tokyo on March 3rd.", "When does our trip to Japan start?"),
    ("My car is a red Toyota Corolla.", "What vehicle do I drive?"),
    ("I moved to Berlin last year.", "Which city do I live in now?"),
    ("The wifi password is sunflower42.", "How do I get on the internet at home?"),
    ("My favourite band is Radiohead.", "Which music group do I love most?"),
    ("I run five kilometres every morning.", "What exercise do I do daily?"),
    ("My brother Paul is a lawyer.", "What does my sibling do for a living?"),
    ("The rent is 1200 euros a month.", "How much do I pay for the flat?"),
    ("I drink my coffee black without sugar.", "How do I take my morning brew?"),
    ("My dentist appointment is on Friday at 10.", "When should I see the doctor for my teeth?"),
    ("I speak Spanish and a little French.", "Which languages do I know?"),
    ("Our wedding anniversary is on May 12.", "When did we get married?"),
    ("I am vegetarian.", "Do I eat meat?"),
    ("My laptop is a ThinkPad X1.", "What computer do I use?"),
    ("I graduated in physics from Oxford.", "What did I study at university?"),
    ("The garden needs watering twice a week.", "How often should the plants get water?"),
    ("My mother lives in Lisbon.", "Where is mum's home?"),
    ("I play the guitar in a jazz trio.", "What instrument do I perform with?"),
    ("The project deadline is the end of April.", "When is the work due?"),
    ("I sleep badly when it is hot.", "What keeps me awake at night?"),
    ("My son is afraid of dogs.", "What animal scares my boy?"),
    ("We are saving for a house.", "What is our money put aside for?"),
    ("I cannot drink milk.", "Am I lactose intolerant?"),
    ("My bike was stolen last week.", "What happened to my bicycle?"),
    ("The boss wants the report by Monday.", "When must the document reach my manager?"),
    ("I prefer trains to planes.", "How do I like to travel?"),
]
FACTS_ZH = [
    ("我的猫叫汤姆。", "我的宠物叫什么名字？"),
    ("我在市医院当护士。", "我是做什么工作的？"),
    ("我对花生过敏。", "我不能吃哪种食物？"),
    ("我们三月三号飞东京。", "我们什么时候去日本？"),
    ("我开一辆红色的丰田车。", "我的汽车是什么牌子？"),
    ("我去年搬到了柏林。", "我现在住在哪个城市？"),
    ("家里的无线密码是向日葵四十二。", "家里上网用什么口令？"),
    ("我每天早上跑五公里。", "我平时做什么锻炼？"),
    ("我哥哥是律师。", "我的兄长从事什么职业？"),
    ("房租每月一千二百欧元。", "公寓一个月要交多少钱？"),
    ("我喝咖啡不加糖。", "我的饮品怎么调？"),
    ("周五上午十点看牙医。", "什么时候去补牙？"),
    ("我会说西班牙语和一点法语。", "我懂哪些外语？"),
    ("我们的结婚纪念日是五月十二日。", "我们哪天成婚的？"),
    ("我吃素。", "我吃肉吗？"),
    ("我的笔记本电脑是联想的。", "我用什么牌子的计算机？"),
    ("我在北京大学读的物理。", "我大学学的什么专业？"),
    ("花园每周浇两次水。", "植物多久需要灌溉？"),
    ("我妈妈住在上海。", "母亲的家在哪里？"),
    ("我在爵士乐队弹吉他。", "我演奏什么乐器？"),
    ("项目截止日期是四月底。", "这份工作何时到期？"),
    ("天热的时候我睡不好。", "夏天夜里为何失眠？"),
    ("我儿子怕狗。", "孩子害怕哪种动物？"),
    ("我们在攒钱买房子。", "我们存款是为了什么？"),
    ("我不能喝牛奶。", "我有乳糖不耐症吗？"),
    ("我的自行车上周被偷了。", "单车出了什么事？"),
    ("老板要求周一交报告。", "文件哪天要给上司？"),
    ("比起飞机我更喜欢坐火车。", "我出行偏爱哪种交通工具？"),
    ("我女儿六月满七岁。", "孩子夏天几岁了？"),
    ("我最喜欢的乐队是五月天。", "我最爱听哪个组合的歌？"),
]
SID = "terminal:bench"


def rss_mb() -> float:
    """This process's resident set size in MB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def recall(search: MemorySearch, facts: list[tuple[str, str]], semantic: bool) -> float:
    """Share of questions whose fact is among the top 5 passages."""
    found = 0
    for fact, question in facts:
        hits = await search.search(SID, question, 5, semantic=semantic)
        found += any(h.text == fact for h in hits)
    return found / len(facts)


async def write_and_index(search: MemorySearch, memory: DailyMemory, session_id: str, name: str, text: str) -> None:
    """A daily memory file written and indexed, as the summariser's writes are."""
    folder = memory.session_dir(session_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text + "\n", encoding="utf-8")
    await search.index.add(session_id, "summary", text, name)


def filler(rng: random.Random, n: int) -> list[str]:
    """Summary-like bullet lines, all different."""
    words = ("meeting", "budget", "train", "Berlin", "report", "garden", "recipe", "ticket", "doctor", "plan",
             "invoice", "python", "holiday", "school", "weather", "price", "call", "email", "friend", "book")
    return [f"{i}: " + " ".join(rng.choice(words) for _ in range(rng.randint(6, 16))) + "." for i in range(n)]


async def main() -> None:
    """Run every measurement and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        rss_before = rss_mb()
        embedder = LocalEmbedder()
        started = time.perf_counter()
        embedder.embed_sync(["warm up"])
        load_s = time.perf_counter() - started
        rss_loaded = rss_mb()
        store = Store(f"sqlite:///{tmp / 'bench.db'}")
        await store.open()
        try:
            memory = DailyMemory(tmp / "memory", UTC)
            search = MemorySearch(MemoryIndex(store, embedder, memory))
            facts = FACTS_EN + FACTS_ZH
            # as the bot does: the daily file is written, then indexed (a search keeps the index in step with
            # the files, so a passage without its file would be dropped)
            await write_and_index(search, memory, SID, "2026-03-01.md", "\n".join(f"- {f}" for f, _ in facts))
            rows = []
            for name, group in (("English", FACTS_EN), ("Chinese", FACTS_ZH), ("all 60", facts)):
                kw = await recall(search, group, semantic=False)
                hy = await recall(search, group, semantic=True)
                rows.append((name, kw, hy))
            chunks = filler(random.Random(7), args.chunks)
            per_k = []
            for _ in range(args.rounds):
                t = time.perf_counter()
                embedder.embed_sync(chunks[:1000])
                per_k.append((time.perf_counter() - t) * 1000)
            big = "terminal:big"
            t = time.perf_counter()
            for day, start in enumerate(range(0, len(chunks), 2000), start=2):
                await write_and_index(search, memory, big, f"2026-03-{day:02d}.md",
                                      "\n".join(chunks[start:start + 2000]))
            index_s = time.perf_counter() - t
            t = time.perf_counter()
            await search.corpus(big)
            cold_ms = (time.perf_counter() - t) * 1000
            queries = [q for _, q in facts]
            embed_ms = []
            for q in queries:
                t = time.perf_counter()
                embedder.embed_sync([q])
                embed_ms.append((time.perf_counter() - t) * 1000)
            lat: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.rounds):
                for semantic in (True, False):  # interleaved
                    for q in queries:
                        t = time.perf_counter()
                        await search.search(big, q, 5, semantic=semantic)
                        lat[semantic].append((time.perf_counter() - t) * 1000)
            rss_end = rss_mb()
        finally:
            await store.close()
    print("recall@5 (60 facts, paraphrased questions sharing no content word):")
    for name, kw, hy in rows:
        print(f"  {name:8s} keywords only {kw:6.1%}   hybrid {hy:6.1%}")
    print(f"embedding, local model ({embedder.name}): {statistics.median(per_k):.0f} ms per 1,000 chunks "
          f"(median of {args.rounds}); one question: median {statistics.median(embed_ms):.1f} ms")
    print(f"model load: {load_s * 1000:.0f} ms; RSS {rss_before:.0f} MB before, {rss_loaded:.0f} MB loaded, "
          f"{rss_end:.0f} MB at the end")
    print(f"{args.chunks:,} chunks in one session: indexed in {index_s:.1f} s; first search loads them in "
          f"{cold_ms:.0f} ms")
    for semantic in (True, False):
        values = sorted(lat[semantic])
        p95 = values[int(len(values) * 0.95) - 1]
        print(f"  search {'hybrid' if semantic else 'keywords'}: median {statistics.median(values):.2f} ms, "
              f"p95 {p95:.2f} ms ({len(values)} searches)")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main())
