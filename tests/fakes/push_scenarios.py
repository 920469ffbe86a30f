"""End-to-end scenarios the push channels (Feishu, DingTalk) share word for word, run against their fakes
(tests/fakes/push_server.py): a kill -9 mid-turn, and two processes of which one holds the connection.

Each takes the fake (its ``push_text``, ``wait_texts``, ``texts``, ``wait_acked``, ``wait``), the fake model, the
bot processes and a private chat; tests/e2e/test_feishu.py and tests/e2e/test_dingtalk.py run them.
"""

from __future__ import annotations

import time
from typing import Any

from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer


def slow_turn_acked(server: Any, llm: FakeOpenAIServer, chat: str) -> str:
    """A message whose turn is in flight (the model takes 5 s) after the platform got its ack; its id."""
    llm.latency = 5.0
    requests = len(llm.requests)
    slow = server.push_text(chat, "slow")
    llm.wait_for_requests(requests + 1, timeout=15)
    server.wait_acked(slow)  # journalled, then acked
    return slow


def kill_9_mid_turn_is_answered_once_after_restart(server: Any, llm: FakeOpenAIServer, bot: BotProcess,
                                                   chat: str) -> None:
    """kill -9 while a turn runs: after the restart it is answered once, quoting its question (a private chat's
    answer replies to nothing), and the platform did not send it again (it was acked)."""
    server.push_text(chat, "first")
    server.wait_texts(chat, 1)
    slow = slow_turn_acked(server, llm, chat)
    bot.kill()
    llm.latency = 0.0
    bot.start()
    server.push_text(chat, "after")
    server.wait_texts(chat, 3)
    time.sleep(1.0)  # nothing more may come
    assert server.texts(chat) == ["echo: first", "> slow\n\necho: slow", "echo: after"]
    assert server.deliveries[server.frames_of[slow]] == 1, "acked once: the platform did not send it again"
    assert bot.stop() == 0


def one_process_receives_and_the_other_takes_over(server: Any, llm: FakeOpenAIServer, bots: list[BotProcess],
                                                  chat: str, receiving: str) -> None:
    """Two processes on one database: one holds the connection (logs ``receiving``); kill -9 of it mid-turn,
    and the other connects and answers that turn and the next message, each once."""
    for bot in bots:
        bot.start(wait_for_log=None)
    try:
        for bot in bots:
            bot.wait_for_log("INFO app: ready:", 60)
        for text in ("one", "two"):
            server.push_text(chat, text)
        assert server.wait_texts(chat, 2) == ["echo: one", "echo: two"]
        server.wait(lambda: sum(receiving in b.log() for b in bots) == 1, 30, "one process receiving")
        assert server.connections == 1
        leader = next(i for i, b in enumerate(bots) if receiving in b.log())
        slow_turn_acked(server, llm, chat)
        bots[leader].kill()
        llm.latency = 0.0
        bots[1 - leader].wait_for_log(receiving, 60)
        server.push_text(chat, "after")
        server.wait_texts(chat, 4, timeout=60)
        time.sleep(1.0)
        assert server.texts(chat) == ["echo: one", "echo: two", "echo: slow", "echo: after"]
    finally:
        for bot in bots:
            if bot.pid is not None:
                bot.stop()
