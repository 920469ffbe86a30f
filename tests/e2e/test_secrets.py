"""Secrets (issue 29): nothing refused is kept, /config shows secrets masked, config.json stays out of git, and a
scan of everything the bot wrote finds none of the secrets typed into it. Through ``python app.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from tests.e2e.test_terminal import UP, expect
from tests.fakes.bot_process import clean_env

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-0123456789a1b2"
TYPED_KEY = "sk-typed-9876543210zyxw"
PASSWORD = "hunter2-pass"


def spawn_terminal(tmp_path: Path, **settings) -> pexpect.spawn:
    """``python app.py`` on a pseudo-terminal, as a user runs it."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"data_dir": "data", **settings}), encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1", "TERM": "xterm", "HOME": str(tmp_path)}
    return pexpect.spawn(sys.executable, [str(ROOT / "app.py"), "--config", str(path)], cwd=str(tmp_path), env=env,
                         encoding="utf-8", timeout=30, dimensions=(24, 160))


def run_piped(tmp_path: Path, stdin: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], input=stdin, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path, env=clean_env())


def test_refused_secrets_never_reach_the_line_history_and_forget_empties_it(tmp_path, openai_server):
    child = spawn_terminal(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key=KEY,
                           admin_password=PASSWORD)
    history = tmp_path / "data" / "terminal_history"
    try:
        expect(child, "you>")
        child.send("hello\r")
        expect(child, "bot> echo: hello\r\n")
        child.send(f"/config open_ai_api_key {TYPED_KEY}\r")
        expect(child, "cannot be set from a chat")
        child.send(f"/auth {PASSWORD}\r")
        expect(child, "You are already an admin.")
        child.send(UP + "\r")  # the last line kept is "hello": the refused ones are not recalled either
        expect(child, "bot> echo: hello\r\n")
        kept = history.read_text(encoding="utf-8")
        assert "\n+hello\n" in kept
        assert TYPED_KEY not in kept and PASSWORD not in kept and "/auth" not in kept
        child.send("/forget confirm\r")
        expect(child, "Deleted for good")
        expect(child, "you>")
        assert history.read_bytes() == b""
        child.send(UP + "x\r")  # nothing left to recall
        expect(child, "bot> echo: x\r\n")
        child.sendcontrol("d")
        expect(child, pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert history.read_text(encoding="utf-8").count("\n+") == 1 and "\n+x\n" in history.read_text(encoding="utf-8")
    assert history.stat().st_mode & 0o777 == 0o600


def test_config_shows_a_password_as_set_and_a_key_by_its_last_4_characters(tmp_path, openai_server):
    (tmp_path / "config.json").write_text(json.dumps({
        "open_ai_api_base": openai_server.base_url, "open_ai_api_key": KEY, "admin_password": PASSWORD,
        "data_dir": "data"}), encoding="utf-8")
    done = run_piped(tmp_path, "/config\n/config admin_password\n/config open_ai_api_key\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "admin_password = set\n" in out and "open_ai_api_key* = sk-…a1b2\n" in out
    assert "telegram_bot_token* = not set\n" in out
    assert "\nadmin_password = set\n" in out and "open_ai_api_key = sk-…a1b2 (changes take effect" in out
    assert "hun" not in out and "…pass" not in out and "0123456789" not in out


def test_a_fresh_clone_starts_without_a_key_and_its_config_file_is_kept_out_of_git(tmp_path):
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode != 0:
        pytest.skip("the source is not a git checkout")
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--", "config.json"], capture_output=True, text=True)
    assert tracked.stdout == "", "config.json is tracked: a key typed into it shows in git diff"
    # a clone's folder: the repository's .gitignore, and no config.json
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_bytes((ROOT / ".gitignore").read_bytes())
    done = run_piped(tmp_path, "hello\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("No model is configured") == 2  # at start, and as the answer
    config = tmp_path / "config.json"
    assert json.loads(config.read_text(encoding="utf-8"))["channel_type"] == "terminal"
    assert config.stat().st_mode & 0o777 == 0o600
    # the user types a key into it, then commits everything
    data = json.loads(config.read_text(encoding="utf-8"))
    config.write_text(json.dumps({**data, "open_ai_api_key": TYPED_KEY}), encoding="utf-8")
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    staged = subprocess.run(["git", "-C", str(tmp_path), "diff", "--cached", "--name-only"], capture_output=True,
                            text=True, check=True).stdout.split()
    assert staged == [".gitignore"]
    # the next start reads the file it made, key included
    done = run_piped(tmp_path, "")
    assert done.returncode == 0 and "No model is configured" not in done.stdout


WRONG_PASSWORD = "wrong-guess-7319"
TYPED_TOKEN = "987654321:AAtypedTokenNeverKept-42"


def test_a_scan_of_everything_the_bot_wrote_finds_none_of_the_secrets_typed_into_it(tmp_path, openai_server):
    from tests.e2e.test_telegram import wait_chat
    from tests.fakes.telegram_api import FakeTelegramAPI

    with FakeTelegramAPI(username="scan_bot") as api:
        child = spawn_terminal(tmp_path, channel_type=["terminal", "telegram"], telegram_bot_token=api.token,
                               telegram_base_url=api.base_url, telegram_rate_limit=False,
                               open_ai_api_base=openai_server.base_url, open_ai_api_key=KEY, admin_password=PASSWORD)
        try:
            expect(child, "you>")
            for line, answer in [(f"/auth {WRONG_PASSWORD}", "Wrong password."),
                                 (f"/auth {PASSWORD}", "You are already an admin."),
                                 (f"/config open_ai_api_key {TYPED_KEY}", "cannot be set from a chat"),
                                 (f"/config telegram_bot_token {TYPED_TOKEN}", "cannot be set from a chat"),
                                 ("hello from the terminal", "bot> echo: hello from the terminal")]:
                child.send(line + "\r")
                expect(child, answer)
            # a Telegram user: a wrong password, the right one, then a secret typed into /config
            for i, (text, answer) in enumerate([
                    (f"/auth {WRONG_PASSWORD}", "Wrong password."), (f"/auth {PASSWORD}", "You are now an admin."),
                    (f"/config open_ai_api_key {TYPED_KEY}", "cannot be set from a chat"),
                    ("hello from telegram", "echo: hello from telegram")], start=1):
                api.push_text(71, text, user_id=71)
                wait_chat(api, 71, lambda texts, a=answer, n=i: len(texts) >= n and a in texts[n - 1])
            child.sendcontrol("c")
            expect(child, pexpect.EOF)
        finally:
            child.close(force=True)
    assert child.exitstatus == 0
    data = tmp_path / "data"
    written = [p for p in data.rglob("*") if p.is_file()]
    assert {"bot.log", "chatbot.db", "terminal_history", "auth_lockouts.json"} <= {p.name for p in written}
    hits = {(p.name, secret) for p in written for secret in (KEY, TYPED_KEY, TYPED_TOKEN, PASSWORD, WRONG_PASSWORD)
            if secret.encode() in p.read_bytes()}
    assert hits == set()
    # and the conversation was kept: the scan looked where the words are
    assert any(b"hello from telegram" in p.read_bytes() for p in written if p.name.startswith("chatbot.db"))
