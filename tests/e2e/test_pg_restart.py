"""A PostgreSQL restart mid-turn: the bot reconnects, runs the turns in flight again and answers them.

Starts a throwaway PostgreSQL cluster in a temporary folder (as .ci/run does), so that it can be
restarted; skipped where initdb is not installed.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.e2e.test_telegram import sent_to, settings, wait_sent
from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI

BINS = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))


class Cluster:
    """A PostgreSQL cluster of its own, run as the postgres user when we are root (initdb refuses root)."""

    def __init__(self, folder: Path) -> None:
        self.bin = Path(BINS[-1]).parent
        self.folder = folder
        self.data = folder / "data"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.as_pg: list[str] = []
        if os.getuid() == 0:
            shutil.chown(folder, "postgres")
            self.as_pg = ["runuser", "-u", "postgres", "--"]

    def run(self, *args: str) -> None:
        """Run a PostgreSQL program (as the cluster's owner)."""
        subprocess.run([*self.as_pg, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        """initdb and start."""
        self.run(str(self.bin / "initdb"), "-D", str(self.data), "--auth=trust", "-U", "postgres", "-E", "UTF8",
                 "--no-locale")
        self.pg_ctl("start")

    def pg_ctl(self, action: str) -> None:
        """``pg_ctl start|restart|stop`` (fast mode)."""
        self.run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "server.log"), "-w",
                 "-m", "fast", "-o", f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder} -c fsync=off",
                 action)

    @property
    def url(self) -> str:
        """The URL of its ``postgres`` database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"


@pytest.fixture
def cluster():
    if not BINS:
        pytest.skip("initdb is not installed")
    if os.getuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser")
    # Not under pytest's tmp_path: its parents are private to root, and the server runs as postgres.
    folder = Path(tempfile.mkdtemp(prefix="pg-restart-"))
    pg = Cluster(folder)
    try:
        pg.start()
        yield pg
    finally:
        try:
            pg.pg_ctl("stop")
        except subprocess.SubprocessError:
            pass
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def servers():
    with FakeTelegramAPI() as api, FakeOpenAIServer() as llm:
        yield api, llm


def test_a_postgresql_restart_mid_turn_is_answered_within_seconds(servers, cluster, tmp_path):
    api, llm = servers
    bot = BotProcess(tmp_path, **settings(api, llm, db_url=cluster.url)).start()
    try:
        api.push_text(40, "before", user_id=40)
        assert wait_sent(api, 40, 1) == ["echo: before"]
        llm.latency = 1.0  # the turns are in flight when the database goes down, and answered while it is
        for chat in (41, 42):
            api.push_text(chat, f"during {chat}", user_id=chat)
        llm.wait_for_requests(3, timeout=10)
        cluster.pg_ctl("stop")
        time.sleep(3.0)  # the answers arrive now and cannot be stored
        llm.latency = 0
        cluster.pg_ctl("start")
        restarted = time.monotonic()
        for chat in (41, 42):
            assert wait_sent(api, chat, 1, timeout=20) == [f"echo: during {chat}"]
        assert time.monotonic() - restarted < 10
        api.push_text(40, "after", user_id=40)
        assert wait_sent(api, 40, 2) == ["echo: before", "echo: after"]
        time.sleep(1.0)
        assert sent_to(api, 41) == ["echo: during 41"] and sent_to(api, 42) == ["echo: during 42"]
    finally:
        assert bot.stop() == 0
    assert "the database is unavailable" in bot.log()
