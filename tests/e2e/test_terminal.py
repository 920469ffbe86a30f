"""The terminal channel (channels/terminal.py): on a pseudo-terminal, as a user types; and piped, plain lines."""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pexpect

from channels.terminal import THINKING, TerminalChannel, start_banner
from config.settings import Config
from core.messages import IncomingMessage
from tests.fakes.bot_process import clean_env, database_from_template
from tests.fakes.openai_server import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[2]
#: Terminal control sequences (cursor moves, colours, modes), removed to read the screen's text.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]")
LEFT, UP = "\x1b[D", "\x1b[A"


def spawn(tmp_path: Path, base_url: str, **settings) -> pexpect.spawn:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"open_ai_api_base": base_url, "open_ai_api_key": "k", "data_dir": "data", **settings}))
    database_from_template(path)  # a migrated empty database: these tests are about the terminal
    env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1", "TERM": "xterm", "HOME": str(tmp_path)}
    return pexpect.spawn(sys.executable, [str(ROOT / "app.py"), "--config", str(path)], cwd=str(tmp_path), env=env,
                         encoding="utf-8", timeout=30, dimensions=(24, 100))


def expect(child: pexpect.spawn, pattern, timeout: float = 30) -> str:
    """Wait for ``pattern``, answering the cursor position requests a real terminal answers meanwhile
    (prompt_toolkit draws the toolbar line only once it knows where the cursor is)."""
    seen = ""
    while True:
        index = child.expect([pattern, re.escape(CPR_REQUEST)], timeout=timeout)
        seen += child.before
        if index == 0:
            return seen
        child.send("\x1b[1;1R")


CPR_REQUEST = "\x1b[6n"


def user_texts(server: FakeOpenAIServer) -> list[str]:
    """The user messages the model was sent, each once, in order."""
    seen: list[str] = []
    for request in server.requests:
        users = [m["content"] for m in request["messages"] if m["role"] == "user"]
        seen = users if len(users) > len(seen) else seen
    return seen


def test_banner_line_editing_history_and_ctrl_d(tmp_path, openai_server):
    child = spawn(tmp_path, openai_server.base_url)
    try:
        banner = ANSI.sub("", expect(child, "Ctrl-D quits"))
        assert f"longchat: model gpt-4o-mini at {openai_server.base_url}\r\n" in banner
        assert f"data folder: {tmp_path / 'data'}\r\n" in banner
        assert "/help lists the commands" in banner
        expect(child, "you>")
        child.send("helo" + LEFT + "l\r")  # a typo fixed with the left arrow
        expect(child, "bot> echo: hello\r\n")
        child.send(UP + "\r")  # the previous line, recalled
        expect(child, "bot> echo: hello\r\n")
        child.send("/context\r")
        expect(child, "bot> ")
        expect(child, "you>")
        child.sendcontrol("d")
        expect(child, pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert user_texts(openai_server) == ["hello", "hello"]  # no escape sequence reached the model or the database
    history = (tmp_path / "data" / "terminal_history").read_text(encoding="utf-8")
    assert "+helo\x1b" not in history and "\n+hello\n" in history
    assert (tmp_path / "data" / "terminal_history").stat().st_mode & 0o777 == 0o600


def test_thinking_while_waiting_and_ctrl_c_stops_at_once(tmp_path, openai_server):
    openai_server.latency = 3.0
    child = spawn(tmp_path, openai_server.base_url)
    try:
        expect(child, "you>")
        child.send("slow question\r")
        expect(child, THINKING)
        expect(child, "bot> echo: slow question\r\n", timeout=20)
        expect(child, "you>")
        child.sendcontrol("c")
        expect(child, "stopping…", timeout=2)
        expect(child, pexpect.EOF, timeout=30)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


LONG_REPLY = " ".join(f"word{i}" for i in range(40))


def restart_piped(tmp_path: Path) -> subprocess.CompletedProcess:
    """The next start, piped with nothing to read: it answers what the journal left unanswered, then exits."""
    return subprocess.run([sys.executable, str(ROOT / "app.py"), "--config", str(tmp_path / "config.json")],
                          input="", capture_output=True, text=True, timeout=60, cwd=tmp_path, env=clean_env())


def test_ctrl_c_while_a_reply_streams_lets_it_finish(tmp_path, openai_server):
    # Issue 40: Ctrl-C pressed while a reply streamed exited in 0.1 s (kill -INT from outside waited), and the
    # half-written reply was answered again from scratch at the next start.
    openai_server.enqueue_stream(LONG_REPLY, delay=0.15, piece=8)  # about 4.5 s of streaming: within the 10 s grace
    child = spawn(tmp_path, openai_server.base_url, web_console_port=0)
    try:
        expect(child, "you>")
        child.send("tell me a long story\r")
        openai_server.wait_for_requests(1, timeout=20)
        child.sendcontrol("c")  # the turn is in flight: the request reached the model
        expect(child, "stopping…", timeout=10)
        expect(child, "waiting up to 10 s for the replies in progress; press Ctrl-C again to stop now")
        screen = ANSI.sub("", expect(child, pexpect.EOF, timeout=30))
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert "word39" in screen  # the whole reply came
    log = "".join(path.read_text(encoding="utf-8") for path in (tmp_path / "data").rglob("*.log"))
    assert "session terminal:local: ok in " in log and "still busy at shutdown" not in log
    again = restart_piped(tmp_path)  # nothing is left to answer again
    assert again.returncode == 0, again.stderr
    assert again.stdout == "" and len(openai_server.requests) == 1


def test_a_second_ctrl_c_stops_at_once(tmp_path, openai_server):
    openai_server.enqueue_stream(LONG_REPLY, delay=1.0, piece=4)  # far longer than the 10 s grace
    child = spawn(tmp_path, openai_server.base_url, web_console_port=0)
    try:
        expect(child, "you>")
        child.send("tell me a long story\r")
        openai_server.wait_for_requests(1, timeout=20)
        child.sendcontrol("c")
        expect(child, "press Ctrl-C again to stop now")
        child.sendcontrol("c")
        screen = ANSI.sub("", expect(child, pexpect.EOF, timeout=30))
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    # cut by the second Ctrl-C, not by the grace running out
    assert "stopping now: what is unfinished resumes at the next start" in screen
    assert "1 session(s) cut short at shutdown" in screen and "still busy at shutdown" not in screen
    assert "word39" not in screen


async def test_piped_lines_are_plain_messages_and_replies_plain_lines() -> None:
    stdin, stdout = io.StringIO("hello\n\n  \nsecond\n"), io.StringIO()
    channel = TerminalChannel(stdin=stdin, stdout=stdout, interactive=False)
    channel.banner = "never shown when piped"
    got: list[IncomingMessage] = []

    async def handler(message: IncomingMessage) -> None:
        got.append(message)
        await channel.send(message, f"re: {message.text}")

    channel.set_handler(handler)
    await channel.start()
    await asyncio.wait_for(channel.wait_closed(), 5)
    await channel.stop()
    assert [(m.channel, m.chat_id, m.user_id, m.text) for m in got] == [
        ("terminal", "local", "local", "hello"), ("terminal", "local", "local", "second")]
    assert stdout.getvalue() == "re: hello\nre: second\n"


def test_start_banner() -> None:
    cfg = Config(model="llama3", open_ai_api_base="http://127.0.0.1:11434/v1", data_dir="/srv/bot")
    assert start_banner(cfg) == ("longchat: model llama3 at http://127.0.0.1:11434/v1\n"
                                 "data folder: /srv/bot\n"
                                 "Type a message and press Enter. /help lists the commands; Ctrl-D quits.")
    assert start_banner(cfg, window="8,192 tokens (from Ollama's /api/ps)").splitlines()[1] == (
        "context window: 8,192 tokens (from Ollama's /api/ps)")


def test_a_streamed_reply_shows_before_it_is_complete(tmp_path, openai_server):
    text = "alpha line\n" + " ".join(["beta"] * 40) + " end."
    openai_server.enqueue_stream(text, delay=0.1, piece=5)  # about 4 s of answer
    child = spawn(tmp_path, openai_server.base_url)
    try:
        expect(child, "you>")
        child.send("stream please\r")
        expect(child, "bot> alpha line\r\n", timeout=20)
        first = time.monotonic()
        screen = ANSI.sub("", expect(child, "beta end.\r\n", timeout=20))
        assert time.monotonic() - first >= 1.5, "the first line was printed while the rest was still coming"
        assert screen.count("beta") > 40, "the unfinished line showed live, growing, where thinking… was"
        expect(child, "you>")
        child.sendeof()
        expect(child, pexpect.EOF)
    finally:
        child.close(force=True)


def test_a_line_the_private_chat_prefix_ignores_gets_a_one_line_hint(tmp_path, openai_server):
    child = spawn(tmp_path, openai_server.base_url, single_chat_prefix=["bot"])  # CowAgent's setting
    try:
        expect(child, "you>")
        child.send("hello\r")
        expect(child, re.escape('not answered: it does not start with one of single_chat_prefix ["bot"]: start it '
                                'with one, or set single_chat_prefix to [""] to answer every message\r\n'), timeout=5)
        expect(child, "you>")
        child.send("bot hello\r")
        expect(child, "bot> echo: hello\r\n")
        expect(child, "you>")  # a Ctrl-D typed before the next prompt reads is taken by the terminal, not the bot
        child.sendcontrol("d")
        expect(child, pexpect.EOF)
    finally:
        child.close(force=True)
    assert user_texts(openai_server) == ["hello"]


def test_a_repaired_config_file_is_said_where_its_rejection_was(tmp_path, openai_server):
    child = spawn(tmp_path, openai_server.base_url)
    path = tmp_path / "config.json"
    good = path.read_text()
    try:
        expect(child, "you>")
        path.write_text('{"model": ')  # an editor's half-written save
        expect(child, "config.json change rejected: .* is not valid JSON", timeout=10)
        path.write_text(json.dumps({**json.loads(good), "model": "gpt-4o"}))
        expect(child, "config.json is valid again: its settings are applied", timeout=10)
        child.sendcontrol("d")
        expect(child, pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
