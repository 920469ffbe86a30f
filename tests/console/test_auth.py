"""console/auth.py: loopback addresses, sessions, CSRF tokens and the login lockout."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.settings import Config, ConfigHolder
from console.auth import MAX_SESSIONS, SESSION_IDLE_SECONDS, USED_TOKEN, Access, SessionStore, csrf_ok, is_loopback


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("192.168.1.10", False), ("::", False), ("example.org", False), ("", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_sessions_expire_when_idle_and_are_capped() -> None:
    now = [1000.0]
    store = SessionStore(clock=lambda: now[0])
    session = store.new()
    assert store.get(session.id) is session and not session.authed
    now[0] += SESSION_IDLE_SECONDS - 1
    assert store.get(session.id) is session  # used: the idle time starts again
    now[0] += SESSION_IDLE_SECONDS + 1
    assert store.get(session.id) is None
    first = store.new()
    for _ in range(MAX_SESSIONS):
        store.new()
    assert store.get(first.id) is None  # the oldest went first
    assert store.get(None) is None and store.get("made-up") is None


def test_csrf_ok_needs_the_sessions_own_token() -> None:
    store = SessionStore()
    one, two = store.new(), store.new()
    assert csrf_ok(one, one.csrf)
    assert not csrf_ok(one, two.csrf)
    assert not csrf_ok(one, "")
    assert not csrf_ok(one, None)
    assert not csrf_ok(None, one.csrf)


def test_the_token_opens_without_a_password_and_only_the_password_with_one(tmp_path: Path) -> None:
    holder = ConfigHolder(Config(data_dir=str(tmp_path)))
    access = Access(holder, tmp_path)
    assert access.mode == "token" and len(access.token) >= 32
    assert access.attempt("127.0.0.1", access.token) is None
    assert access.attempt("127.0.0.1", "wrong") == "Wrong token."
    holder.replace(Config(data_dir=str(tmp_path), web_console_password="s3cret-pass"))
    assert access.mode == "password"
    assert access.attempt("127.0.0.1", access.token) == "Wrong password."  # the token no longer opens it
    assert access.attempt("127.0.0.1", "s3cret-pass") is None


def test_five_failures_lock_one_address_out_across_restarts(tmp_path: Path) -> None:
    holder = ConfigHolder(Config(data_dir=str(tmp_path), web_console_password="pw-123456"))
    access = Access(holder, tmp_path)
    answers = [access.attempt("10.0.0.7", f"guess-{n}") for n in range(5)]
    assert answers[:4] == ["Wrong password."] * 4
    assert answers[4] == "Wrong password. Too many failed logins: your address is locked out for 10 minutes."
    assert access.attempt("10.0.0.7", "pw-123456") == ("Too many failed logins from your address. "
                                                       "Try again in 10 minutes.")
    assert access.attempt("10.0.0.8", "pw-123456") is None  # another address is not locked
    again = Access(holder, tmp_path)  # a restart: the lockout is kept in the data folder
    assert again.locked_for("10.0.0.7") > 590
    assert (tmp_path / "console_lockouts.json").stat().st_mode & 0o777 == 0o600


def test_the_token_logs_in_once_and_a_new_one_replaces_an_unused_one(tmp_path: Path) -> None:
    access = Access(ConfigHolder(Config(data_dir=str(tmp_path))), tmp_path)
    first = access.token
    assert access.attempt("127.0.0.1", first) is None
    assert access.attempt("127.0.0.1", first) == USED_TOKEN  # one-time: any browser, the same one too
    second = access.renew()
    assert second != first and access.token == second
    third = access.renew()  # a newer link replaces one not used yet
    assert access.attempt("127.0.0.1", second) == USED_TOKEN
    assert access.attempt("127.0.0.1", third) is None
    assert access.attempt("127.0.0.1", third) == USED_TOKEN
    assert access.attempt("127.0.0.1", "") == "Wrong token."  # no token in force: nothing opens it
    assert access.issued == [first, second, third]  # the log page masks them all
    for _ in range(5):  # the operator's own old links never lock the address out
        assert access.attempt("127.0.0.1", first) == USED_TOKEN
    assert access.locked_for("127.0.0.1") == 0
