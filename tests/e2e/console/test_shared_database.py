"""Two bot processes on one PostgreSQL: each serves its own console, and both show the same conversations
(the pages read the database and the data folder, not a process's memory). Skipped without TEST_DATABASE_URL."""

from __future__ import annotations

import re
import time

import pytest

from tests.conftest import TEST_DATABASE_URL
from tests.console.conftest import DESKTOP, free_port
from tests.fakes.cluster import Cluster, fresh_schema
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI

pytestmark = pytest.mark.skipif(not TEST_DATABASE_URL, reason="TEST_DATABASE_URL not set")


def test_every_process_shows_the_same_conversation(browser, tmp_path):
    with FakeTelegramAPI(username="console_test_bot") as api, FakeOpenAIServer() as llm, \
            fresh_schema(TEST_DATABASE_URL) as db_url:
        cluster = Cluster(tmp_path, api, llm, db_url, processes=2, mode="polling", shared_config=False)
        for bot in cluster.bots:
            bot.settings["web_console_port"] = free_port()
        with cluster:
            api.push_text(77, "Remember the blue door", user_id=77, first_name="Carol")
            deadline = time.monotonic() + 30
            while api.chat_texts(77) != ["echo: Remember the blue door"]:
                assert time.monotonic() < deadline, api.chat_texts(77)
                time.sleep(0.05)
            seen, pids = [], []
            for bot in cluster.bots:
                bot.wait_for_log("web console: http")
                match = re.search(r"web console: (http://\S+)", bot.log())
                assert match is not None
                context = browser.new_context(viewport=DESKTOP)
                page = context.new_page()
                page.goto(match.group(1))
                page.goto(match.group(1).split("?")[0] + "conversation?id=telegram:77")
                seen.append((page.locator("h1").inner_text(), page.locator("#transcript pre").first.inner_text()))
                page.goto(match.group(1).split("?")[0])
                process = page.locator("dd", has_text="pid").inner_text()
                assert "among the processes sharing this database" in process
                pids.append(process.split()[1].rstrip(","))
                context.close()
            assert seen == [("Carol", "Remember the blue door")] * 2
            assert sorted(pids) == sorted(str(pid) for pid in cluster.pids())  # two processes served them
