"""End to end: ``python app.py`` as a subprocess, terminal channel piped, against the fake OpenAI server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fakes.bot_process import database_from_template

ROOT = Path(__file__).resolve().parents[2]
SECRET_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TELEGRAM_BOT_TOKEN")


def clean_env() -> dict[str, str]:
    """The environment without any real secrets or endpoints."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_app(config_path: Path, stdin: str, timeout: float = 60, *,
            from_template: bool = False) -> subprocess.CompletedProcess:
    """Run app.py on ``stdin`` (the terminal channel); ``from_template``: on a copy of the harness's migrated empty
    database (tests/fakes/bot_process.py), not a first start that migrates it."""
    if from_template:
        database_from_template(config_path)
    return subprocess.run([sys.executable, str(ROOT / "app.py"), "--config", str(config_path)], input=stdin,
                          capture_output=True, text=True, timeout=timeout, cwd=config_path.parent, env=clean_env())


def write_config(tmp_path: Path, **values) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(values), encoding="utf-8")
    return path


def test_two_lines_two_replies_with_context(tmp_path, openai_server):
    path = write_config(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key="test-key",
                        data_dir="data")
    proc = run_app(path, "hello there\nwhat did I say?\n", from_template=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["echo: hello there", "echo: what did I say?"]
    assert "Traceback" not in proc.stderr
    second = openai_server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[1]["content"] == "hello there"
    assert second[2]["content"] == "echo: hello there"
    assert (tmp_path / "data" / "chatbot.db").exists()


def test_without_a_key_the_bot_explains_and_exits_cleanly(tmp_path):
    path = write_config(tmp_path, data_dir="data")
    proc = run_app(path, "hello\n")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "OPENAI_API_KEY" in out and "open_ai_api_key" in out and "open_ai_api_base" in out
    assert "Ollama" in out
    # the hint is printed at start and given as the answer to the message
    assert out.count("No model is configured") == 2
    assert "Traceback" not in proc.stderr


def test_a_bad_config_is_one_clear_line(tmp_path):
    path = write_config(tmp_path, agent_max_context_turn=3)
    proc = run_app(path, "")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("config error: unknown config key 'agent_max_context_turn'; "
                                   "did you mean agent_max_context_turns?")


def test_an_unknown_channel_is_one_clear_line_naming_the_nearest(tmp_path):
    path = write_config(tmp_path, channel_type=["terminal", "telegarm"], data_dir="data")
    proc = run_app(path, "")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("config error: invalid value for 'channel_type': unknown channel 'telegarm': the "
                                   "known channels are dingtalk, feishu, telegram, terminal, web, wechat, wecom, "
                                   "weixin; did you mean 'telegram'?")


def summary_aware(body):
    """Answer summary requests with a bullet; leave chat requests to the default echo."""
    from summaries.text import SUMMARY_SYSTEM_PROMPT

    if body["messages"][0]["content"] == SUMMARY_SYSTEM_PROMPT:
        return "- the user counted messages"
    return None


def test_trimmed_turns_are_summarised_injected_and_saved(tmp_path, openai_server):
    openai_server.responder = summary_aware
    # A model that takes a moment, as real ones do: with instant answers the piped turns can all finish
    # before the background summary of the first trim is stored, and no request would carry it.
    openai_server.latency = 0.05
    path = write_config(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key="k",
                        agent_max_context_turns=4, data_dir="data", timezone="UTC")
    lines = "".join(f"message {i}\n" for i in range(1, 9))
    proc = run_app(path, lines, from_template=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"echo: message {i}" for i in range(1, 9)]
    chats = [r for r in openai_server.requests if r.get("tools")]
    summaries = [r for r in openai_server.requests if not r.get("tools")]
    assert summaries and all(r.get("temperature") == 0 for r in summaries)
    injected = [r for r in chats
                if next(m for m in r["messages"] if m["role"] == "user")["content"].startswith(
                    "[System: Previous conversation summary — ")]
    assert injected, "a later request carries the summary in its first user message"
    first_user = next(m for m in injected[-1]["messages"] if m["role"] == "user")["content"]
    # the summary lost the numbers the user wrote: the check keeps the user's own words after it
    assert "- the user counted messages\n- (kept) message 1\n" in first_user
    assert "\n\nThe recent conversation continues below.\n\n---\n\n" in first_user
    memory = list((tmp_path / "data" / "memory" / "terminal_local").glob("*.md"))
    assert len(memory) == 1
    text = memory[0].read_text(encoding="utf-8")
    assert text.startswith("# Daily Memory: ")
    assert "## Trimmed Context (" in text and "- the user counted messages" in text


def test_every_message_is_answered_under_a_small_context_limit(tmp_path, openai_server):
    openai_server.max_prompt_chars = 6_000
    path = write_config(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key="k", data_dir="data")
    lines = "".join(f"long message {i} " + "words " * 300 + "\n" for i in range(12))
    proc = run_app(path, lines, from_template=True)
    assert proc.returncode == 0, proc.stderr
    replies = proc.stdout.splitlines()
    assert len(replies) == 12
    assert all(r.startswith(f"echo: long message {i} ") for i, r in enumerate(replies))
    overflowed = [r for r in openai_server.requests
                  if sum(len(m.get("content") or "") for m in r["messages"]) > 6_000]
    assert overflowed, "the limit was actually hit and recovered from"


def test_a_missing_config_file_names_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "config.json"
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), "--config", str(missing)], input="",
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, env=clean_env())
    assert proc.returncode == 2
    assert proc.stderr == f"config error: {missing} does not exist\n"
    assert proc.stdout == ""


def test_an_empty_config_file_is_refused_not_taken_as_defaults(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("", encoding="utf-8")
    proc = run_app(path, "")
    assert proc.returncode == 2
    assert proc.stderr == f"config error: {path} is empty; write {{}} in it for all defaults\n"


def test_an_unwritable_data_folder_is_named(tmp_path):
    (tmp_path / "blocker").write_text("a file where the data folder should be", encoding="utf-8")
    path = write_config(tmp_path, data_dir="blocker/data")
    proc = run_app(path, "hello\n")
    assert proc.returncode == 2
    assert proc.stderr == (f"setup error: the data folder {tmp_path / 'blocker' / 'data'} cannot be written "
                           "(Not a directory); fix its permissions or set data_dir in config.json to a folder "
                           "you can write\n")
    assert proc.stdout == ""


def test_no_channel_that_can_run_exits_with_the_reason(tmp_path):
    path = write_config(tmp_path, channel_type="telegram", data_dir="data")
    proc = run_app(path, "")
    assert proc.returncode == 2
    assert proc.stderr == ("setup error: no channel can run: telegram: telegram_bot_token is empty: get a token "
                           "from @BotFather and set TELEGRAM_BOT_TOKEN or telegram_bot_token in config.json\n")


def test_wechat_alone_and_offline_exits_with_the_reason(tmp_path):
    # No WeChat servers here: itchat's requests go to a proxy port nothing listens on, so the login fails.
    path = write_config(tmp_path, channel_type="wechat", data_dir="data")
    env = {**clean_env(), "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "",
           "no_proxy": ""}
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), "--config", str(path)], input="",
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[-1] == ("setup error: no channel can run: wechat: login failed: cannot reach the WeChat servers "
                         "(itchat gave up)")
    assert "Traceback" not in proc.stderr  # itchat's own traceback goes to the log file only
    assert "Traceback" in (tmp_path / "data" / "bot.log").read_text(encoding="utf-8")


def test_wechat_alone_without_itchat_exits_with_the_reason(tmp_path):
    path = write_config(tmp_path, channel_type="wechat", data_dir="data")
    script = ("import sys; sys.modules['itchat'] = None  # as if itchat-uos were not installed\n"
              "import app; sys.exit(app.main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, "-c", script, "--config", str(path)], input="", capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env=clean_env())
    assert proc.returncode == 2
    assert proc.stderr == ("setup error: no channel can run: wechat: itchat-uos cannot be imported "
                           "(ModuleNotFoundError: import of itchat halted; None in sys.modules); install it with "
                           "pip install -r requirements.txt\n")


def test_telegram_alone_with_a_rejected_token_exits_with_the_reason(tmp_path):
    from tests.fakes.telegram_api import FakeTelegramAPI

    with FakeTelegramAPI() as api:
        path = write_config(tmp_path, channel_type="telegram", telegram_bot_token="123:revoked",
                            telegram_base_url=api.base_url, data_dir="data")
        proc = run_app(path, "")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == ("setup error: no channel can run: telegram: the bot token was rejected; "
                                            "check telegram_bot_token / TELEGRAM_BOT_TOKEN")
    assert "Traceback" not in proc.stderr


def test_a_refused_model_endpoint_is_one_line_naming_open_ai_api_base(tmp_path):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}/v1"
    path = write_config(tmp_path, open_ai_api_base=base, data_dir="data")
    # the probe runs right after start; a second line keeps stdin open until it has answered
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--config", str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=clean_env())
    hint = ("The model endpoint " + base + " refused the connection: check that the model server is running and "
            "that open_ai_api_base in config.json points at it.")
    lines = []
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)
        if hint in line:
            break
    proc.communicate("", timeout=60)
    assert any(line.rstrip().endswith("WARNING app: " + hint) for line in lines), lines
    assert "Traceback" not in "".join(lines)


def test_start_lines_files_and_modes(tmp_path, openai_server):
    path = write_config(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key="sk-secret-abcdef123456",
                        data_dir="data")
    path.chmod(0o644)
    proc = run_app(path, "/config model m2\nhello\n")
    assert proc.returncode == 0, proc.stderr
    data = tmp_path / "data"
    log = (data / "bot.log").read_text(encoding="utf-8")
    start = next(line for line in log.splitlines() if " INFO app: starting: " in line)
    assert start.endswith(f"starting: model gpt-4o-mini at {openai_server.base_url}; channels terminal; "
                          f"database sqlite:///{data / 'chatbot.db'}; data folder {data}")
    assert "alembic" not in log  # migration chatter stays out of the log
    assert "sk-secret-abcdef123456" not in log and "sk-secret-abcdef123456" not in proc.stderr
    assert data.stat().st_mode & 0o777 == 0o700
    for name in ("chatbot.db", "bot.log"):
        assert (data / name).stat().st_mode & 0o777 == 0o600, name
    assert path.stat().st_mode & 0o777 == 0o600  # the bot rewrote it (/config)
    assert json.loads(path.read_text())["model"] == "m2"


def test_a_cowagent_config_starts_and_warns_once(tmp_path, openai_server):
    path = write_config(tmp_path, channel_type="terminal", open_ai_api_base=openai_server.base_url,
                        open_ai_api_key="k", hot_reload=True, conversation_max_tokens=1000, temperature=0.9,
                        expires_in_seconds=3600, appdata_dir="data")
    proc = run_app(path, "hello\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["echo: hello"]
    warnings = [line for line in proc.stderr.splitlines() if "chatgpt-on-wechat" in line]
    assert [w.split(" WARNING app: ", 1)[1] for w in warnings] == [
        "config: chatgpt-on-wechat settings mapped: hot_reload -> wechat_hot_reload, appdata_dir -> data_dir",
        "config: chatgpt-on-wechat settings ignored (no counterpart here): conversation_max_tokens, temperature, "
        "expires_in_seconds",
    ]


def test_a_model_window_under_16k_is_refused_unless_set_explicitly(tmp_path, openai_server):
    path = write_config(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key="k", model="gpt-4",
                        data_dir="data")
    proc = run_app(path, "hello\n")
    assert proc.returncode == 2
    assert proc.stderr == ("config error: model 'gpt-4' has a context window of only 8192 tokens, too small for "
                           "long conversations (at least 16000 are needed). Choose a larger model, or set "
                           "model_context_window in config.json to the model's real window to use it anyway.\n")
    assert openai_server.requests == []
    path = write_config(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key="k", model="gpt-4",
                        model_context_window=8192, data_dir="data")
    proc = run_app(path, "hello\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "echo: hello\n"
    log = (tmp_path / "data" / "bot.log").read_text(encoding="utf-8")
    assert "config: model 'gpt-4' has a context window of 8192 tokens (under 32000)" in log
