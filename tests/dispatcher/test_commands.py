"""Tests for dispatcher/commands.py: parsing ``/cmd@bot args``, and the command registry."""

import pytest

from core.messages import IncomingMessage
from core.records import SessionInfo
from dispatcher.commands import Command, CommandObject, CommandRegistry, CommandRequest, parse_command


@pytest.mark.parametrize(("text", "expected"), [
    ("/help", CommandObject(command="help")),
    ("/config@MyBot model gpt-4o", CommandObject(command="config", args="model gpt-4o", mention="MyBot")),
    ("/Context clear", CommandObject(command="context", args="clear")),
    ("  /compact  ", CommandObject(command="compact")),
    ("/config key\nline two", CommandObject(command="config", args="key\nline two")),
    ("/auth@bot   s3cret  ", CommandObject(command="auth", args="s3cret", mention="bot")),
])
def test_parse_command(text, expected):
    assert parse_command(text) == expected


@pytest.mark.parametrize("text", ["hello /help", "/ not a command", "", "help", "/help@", "/he-lp"])
def test_not_a_command(text):
    assert parse_command(text) is None


def test_argv_splits_on_whitespace():
    assert parse_command("/Context  clear now").argv == ["clear", "now"]
    assert parse_command("/help").argv == []


async def _reply(request: CommandRequest) -> str:
    return f"{request.command.command} in {request.session_id}"


def test_registry_keeps_order_and_replaces_by_name():
    registry = CommandRegistry()
    registry.register(Command("help", "list", _reply))
    registry.register(Command("config", "settings", _reply, admin_only=True))
    replacement = Command("help", "list the commands", _reply)
    registry.register(replacement)
    assert [c.name for c in registry.all()] == ["help", "config"]
    assert registry.get("help") is replacement
    registry.unregister("config")
    registry.unregister("config")  # absent: nothing happens
    assert registry.get("config") is None
    assert [c.name for c in registry.all()] == ["help"]


async def test_request_carries_the_session():
    msg = IncomingMessage(channel="telegram", chat_id="5", user_id="9", text="/help")
    info = SessionInfo(session_id="telegram:5", channel="telegram", chat_id="5", user_id="9")
    request = CommandRequest(message=msg, command=parse_command(msg.text), session=info, is_admin=False)
    assert request.session_id == "telegram:5"
    assert request.user_key == "telegram:9"
    assert await _reply(request) == "help in telegram:5"
