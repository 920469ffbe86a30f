"""The knowledge base with three ``app.py`` processes on one PostgreSQL (DESIGN §10, §14): a document added through
one process is found by all three, a file dropped in the shared folder ends up indexed once, and a removal through
one process takes it out of every process's search.

PostgreSQL only: skipped without ``TEST_DATABASE_URL``.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

import pytest

from tests.fakes.cluster import ADMIN_ID, Cluster, fresh_schema
from tests.fakes.documents import make_pdf
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.knowledge.test_knowledge import MANUAL

TEST_DATABASE_URL = os.environ.get("TEST_DATABASE_URL", "")
pytestmark = pytest.mark.skipif(not TEST_DATABASE_URL, reason="TEST_DATABASE_URL not set (PostgreSQL only)")

GROUP = -1005


def model(body: dict[str, Any]) -> dict[str, Any]:
    """Call knowledge_search with the user's words; then answer with the tool's result, as it came."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return {"content": "found: " + last["content"]}
    text = str(last["content"]).split("?")[0].split(" ", 1)[-1]
    return {"content": None, "tool_calls": [{"id": f"call_{time.monotonic_ns()}", "type": "function", "function": {
        "name": "knowledge_search", "arguments": json.dumps({"query": text})}}]}


def group_texts(api: FakeTelegramAPI) -> list[str]:
    return [str(m.get("text")) for m in list(api.sent) if int(m.get("chat_id", 0)) == GROUP]


def wait_texts(api: FakeTelegramAPI, n: int, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(group_texts(api)) < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"{group_texts(api)}")
        time.sleep(0.1)
    return group_texts(api)


def test_three_processes_share_the_documents(tmp_path):
    with FakeTelegramAPI(username="kb_bot") as api, FakeOpenAIServer() as llm, \
            fresh_schema(TEST_DATABASE_URL) as db_url:
        llm.responder = model
        # an empty schema, not migrated by the harness: the three processes' first starts migrate it at once
        cluster = Cluster(tmp_path, api, llm, db_url, processes=3, fresh_database=True)
        group = {"chat_type": "supergroup", "title": "Support"}
        try:
            cluster.start()
            api.push_document(GROUP, make_pdf(MANUAL), user_id=ADMIN_ID, file_name="zephyr.pdf",
                              caption="/kb add", **group)
            assert wait_texts(api, 1)[0] == f"Added zephyr.pdf in telegram-group-{GROUP}: 4 pages, 4 chunks indexed."
            # each question goes to the next process (webhooks round robin): every one finds page 3
            for n in range(3):
                api.push_text(GROUP, f"@kb_bot warranty months {n}?", user_id=5, **group)
                assert wait_texts(api, 2 + n)[1 + n].startswith("found: [zephyr.pdf, p. 3] Warranty.")
            # a file dropped in the shared folder: every process watches it, it is indexed once
            folder = cluster.data_dir / "knowledge" / "global"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "faq.md").write_text("# Returns\nReturns are accepted within 30 days of delivery.")
            deadline = time.monotonic() + 60
            texts: list[str] = []
            while time.monotonic() < deadline:
                api.push_text(GROUP, "@kb_bot returns accepted delivery?", user_id=5, **group)
                texts = wait_texts(api, len(group_texts(api)) + 1)
                if "[faq.md, § Returns]" in texts[-1]:
                    break
            assert texts[-1].startswith("found: [faq.md, § Returns] Returns are accepted within 30 days")
            api.push_text(GROUP, "/kb", user_id=5, **group)
            listed = wait_texts(api, len(texts) + 1)[-1]
            assert listed.count("faq.md") == 1 and listed.count("zephyr.pdf") == 1
            # removed through one process: no process finds it any more
            api.push_text(GROUP, "/kb remove zephyr.pdf", user_id=ADMIN_ID, **group)
            assert wait_texts(api, len(texts) + 2)[-1] == f"Removed zephyr.pdf from telegram-group-{GROUP} (4 chunks)."
            for n in range(3):
                api.push_text(GROUP, f"@kb_bot warranty months {n}?", user_id=5, **group)
                assert "zephyr.pdf" not in wait_texts(api, len(texts) + 3 + n)[-1]
        finally:
            codes = cluster.stop()
        assert codes == [0, 0, 0]
        for bot in cluster.bots:
            assert "Traceback" not in bot.log()
        # three first starts on one empty schema: one migrates it; one that waited for it says so, not "upgraded"
        logs = [bot.log() for bot in cluster.bots]
        assert sum("Database schema upgraded from empty to " in log for log in logs) == 1, logs
        assert not any(re.search(r"upgraded from (\w+) to \1\b", log) for log in logs), logs
