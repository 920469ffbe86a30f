"""Chat commands: parsing ``/cmd@botname args``, what a handler receives, and the registry the dispatcher consults."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from config.settings import NESTED_SECRET_KEYS, SECRET_KEYS
from core.messages import IncomingMessage
from core.records import SessionInfo

logger = logging.getLogger(__name__)

#: Commands whose arguments are secrets: only the command's name is ever kept.
SECRET_COMMANDS = frozenset({"auth"})
_COMMAND = re.compile(r"^/(?P<command>[A-Za-z0-9_]+)(?:@(?P<mention>[A-Za-z0-9_]+))?(?:\s+(?P<args>.*))?$", re.S)

if TYPE_CHECKING:
    from bootstrap.services import Services
    from channels.base import BaseChannel


@dataclass(frozen=True, slots=True)
class CommandObject:
    """A parsed ``/cmd@botname args``."""

    command: str
    args: str = ""
    mention: str | None = None
    prefix: str = "/"

    @property
    def argv(self) -> list[str]:
        """The arguments split on whitespace."""
        return self.args.split()


def parse_command(text: str) -> CommandObject | None:
    """Parse a command (name lower-cased), or return None when the text is not one."""
    match = _COMMAND.match(text.strip())
    if match is None:
        return None
    return CommandObject(command=match["command"].lower(), args=(match["args"] or "").strip(),
                         mention=match["mention"])


def secret_free(command: CommandObject) -> str | None:
    """What may be kept of a command whose arguments hold a secret (DESIGN §1.6), or None when it holds none:
    of ``/auth <password>`` its name only, of ``/config <secret key> <value>`` (refused) not the value."""
    if command.command in SECRET_COMMANDS and command.args:
        return f"/{command.command}"  # never store a password
    if command.command == "config":
        argv = command.argv
        if len(argv) > 1 and argv[0].split(".")[0].lower() in SECRET_KEYS | NESTED_SECRET_KEYS:
            # /config refuses to set a secret, but the value was typed into the chat: never store it.
            return f"/config {argv[0]} ***"
    return None


def keeps_no_secret(text: str) -> bool:
    """True when a typed line may be kept as it is (the terminal's line history asks)."""
    command = parse_command(text)
    return command is None or secret_free(command) is None


@dataclass(frozen=True, slots=True)
class CommandRequest:
    """One command invocation."""

    message: IncomingMessage
    command: CommandObject
    #: the session the command was sent in, as :func:`dispatcher.identity.session_for` derived it
    session: SessionInfo
    is_admin: bool
    #: the application's services (config, store, sessions, agent, summariser, ...), for built-ins
    services: Services | None = None
    #: the channel the command came through (its chat-side state, e.g. the terminal's line history)
    channel: BaseChannel | None = None

    @property
    def session_id(self) -> str:
        """The session's id."""
        return self.session.session_id

    @property
    def user_key(self) -> str:
        """``<channel>:<user id>``, as in ``admin_users``."""
        return f"{self.message.channel}:{self.message.user_id}"


CommandHandler = Callable[[CommandRequest], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class Command:
    """A registered command."""

    name: str
    description: str
    handler: CommandHandler
    admin_only: bool = False
    private_only: bool = False


class CommandRegistry:
    """Commands by name. Registering a name again replaces it (so a reload never registers twice)."""

    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}

    def register(self, command: Command) -> None:
        """Add or replace a command."""
        self._commands[command.name] = command

    def unregister(self, name: str) -> None:
        """Remove a command if present."""
        self._commands.pop(name, None)

    def get(self, name: str) -> Command | None:
        """The command called ``name``."""
        return self._commands.get(name)

    def all(self) -> list[Command]:
        """Every command, in registration order."""
        return list(self._commands.values())
