"""The terminal's line history (channels/terminal_history.py): refused secrets are never kept, /forget empties it."""

from __future__ import annotations

from prompt_toolkit.history import FileHistory

from channels.terminal_history import open_history
from dispatcher.commands import keeps_no_secret


def test_a_file_an_older_version_wrote_secrets_to_is_scrubbed_and_new_ones_are_never_kept(tmp_path) -> None:
    path = tmp_path / "terminal_history"
    old = FileHistory(str(path))
    for line in ["hello", "/auth hunter2-pass", "/config open_ai_api_key sk-old-0123456789abcd", "/auth",
                 "/config admin_password", "two\nlines"]:
        old.store_string(line)
    path.chmod(0o600)
    history = open_history(path, keeps_no_secret)
    assert list(history.load_history_strings()) == ["two\nlines", "/config admin_password", "/auth", "hello"]
    text = path.read_text(encoding="utf-8")
    assert "hunter2" not in text and "sk-old" not in text
    assert path.stat().st_mode & 0o777 == 0o600
    history.append_string("/config telegram_bot_token 123:abc-new")
    history.append_string("/AUTH@bot s3cret")
    history.append_string("kept")
    assert history.get_strings()[-1] == "kept" and "123:abc-new" not in path.read_text(encoding="utf-8")
    assert "s3cret" not in path.read_text(encoding="utf-8")
    assert "s3cret" not in "".join(history.get_strings())
    history.clear()
    assert path.read_bytes() == b"" and history.get_strings() == []
    assert path.stat().st_mode & 0o777 == 0o600


def test_without_a_file_the_history_is_kept_for_this_run_only_and_filtered_too(tmp_path) -> None:
    history = open_history(None, keeps_no_secret)
    history.append_string("/auth pw-1234")
    history.append_string("hi")
    assert history.get_strings() == ["hi"]
    history.clear()
    assert history.get_strings() == []
