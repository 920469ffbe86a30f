"""The web console beside the chat channels, through ``app.py``: the chat keeps running when the console cannot
start, and the console's link shows on an interactive terminal."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from tests.console.conftest import free_port
from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI


@pytest.mark.parametrize("why", ["port in use", "another address"])
def test_the_chat_keeps_running_when_the_console_cannot_start(tmp_path: Path, why: str) -> None:
    with FakeTelegramAPI(username="console_test_bot") as api, FakeOpenAIServer() as llm, socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        extra = {"web_console_port": port} if why == "port in use" else \
            {"web_console_port": free_port(), "web_console_listen": "0.0.0.0"}
        proc = BotProcess(tmp_path, channel_type="telegram", telegram_bot_token=api.token,
                          telegram_base_url=api.base_url, telegram_rate_limit=False,
                          open_ai_api_base=llm.base_url, open_ai_api_key="k", data_dir="data", **extra).start()
        try:
            proc.wait_for_log("web console not started: ")
            api.push_text(42, "still there?", user_id=42, first_name="Bo")
            deadline = time.monotonic() + 15
            while api.chat_texts(42) != ["echo: still there?"]:
                assert time.monotonic() < deadline, api.chat_texts(42)
                time.sleep(0.05)
        finally:
            assert proc.stop() == 0
        lines = [line for line in proc.log().splitlines() if "web console" in line]
        assert len(lines) == 1 and " WARNING console.server: web console not started: " in lines[0]
        assert "Traceback" not in proc.log()


def test_the_link_is_shown_on_an_interactive_terminal(tmp_path: Path) -> None:
    import json
    import sys

    import pexpect

    from tests.e2e.test_terminal import ANSI, expect

    port = free_port()
    with FakeOpenAIServer() as llm:
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"open_ai_api_base": llm.base_url, "open_ai_api_key": "k", "data_dir": "data",
                                    "web_console_port": port}))
        env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1", "TERM": "xterm", "HOME": str(tmp_path)}
        root = Path(__file__).resolve().parents[3]
        child = pexpect.spawn(sys.executable, [str(root / "app.py"), "--config", str(path)], cwd=str(tmp_path),
                              env=env, encoding="utf-8", timeout=30, dimensions=(24, 120))
        try:
            screen = ANSI.sub("", expect(child, r"\?token=[A-Za-z0-9_-]{32}"))
            assert screen.endswith(f"web console: http://127.0.0.1:{port}/")  # above the prompt
            expect(child, "you>")
            child.send("/console\r")  # the start link is one-time: a new one on demand
            expect(child, f"Web console: http://127.0.0.1:{port}/\\?token=")
            expect(child, "it replaces any earlier link")
            child.sendcontrol("d")
            child.expect(pexpect.EOF, timeout=30)
        finally:
            child.close(force=True)
    log = (tmp_path / "data" / "bot.log").read_text(encoding="utf-8")
    assert f"INFO console.server: web console: http://127.0.0.1:{port}/?token=" in log
    assert "INFO console.server: web console: new one-time link (asked by terminal:" in log
