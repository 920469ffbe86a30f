"""``mcp_servers`` (DESIGN §1.2, §13): one validated entry per MCP server, in the format of Claude Desktop,
Cursor and VS Code: ``{"command": …, "args": […], "env": {…}, "cwd": …}`` for a program on this machine
(stdio), or ``{"url": …, "headers": {…}}`` for a server over HTTP (Streamable HTTP; ``"transport": "sse"`` for
an older server). Values in ``env`` and ``headers`` are secrets: :func:`mask_servers` shows them masked and
:func:`server_secrets` hands them to the log redactor.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

#: A server's name becomes the prefix of its tools' names (``<server>__<tool>``), which the OpenAI API
#: limits to ``[a-zA-Z0-9_-]{1,64}``.
SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,30}$")
#: The keys of an entry whose values are secrets.
SECRET_FIELDS = ("env", "headers")


class ToolFilter(BaseModel):
    """``{"allow": […]}`` or ``{"deny": […]}``: the server's own tool names."""

    model_config = ConfigDict(extra="forbid", strict=True)

    allow: list[str] | None = None
    deny: list[str] | None = None

    @model_validator(mode="after")
    def _one_list(self) -> ToolFilter:
        if self.allow is not None and self.deny is not None:
            raise ValueError('give "allow" or "deny", not both')
        return self

    def permits(self, name: str) -> bool:
        """Whether the server's tool ``name`` may be offered."""
        if self.allow is not None:
            return name in self.allow
        return self.deny is None or name not in self.deny


class McpServerConfig(BaseModel):
    """One entry of ``mcp_servers``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    command: str = ""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    #: for a URL: ``"streamable_http"`` (also spelt ``"http"`` or ``"streamable-http"``) or ``"sse"``;
    #: ``"stdio"`` may be given for a command
    transport: Literal["stdio", "streamable_http", "streamable-http", "http", "sse"] | None = None
    enabled: bool = True
    timeout_seconds: float = Field(30.0, gt=0, le=600)
    tools: ToolFilter = Field(default_factory=ToolFilter)
    #: session ids, ``<channel>:group:<chat id>``, or ``"*"``; None: admins' private chats for a command,
    #: every chat for a URL
    chats: list[str] | None = None
    #: VS Code's entries carry a ``type`` ("stdio", "http", "sse"); accepted as ``transport``
    type: Literal["stdio", "http", "sse", "streamable_http", "streamable-http"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _strict_numbers(cls, data: Any) -> Any:
        # strict mode refuses 30 for a float field; a whole number of seconds is what people write
        if isinstance(data, dict) and isinstance(data.get("timeout_seconds"), int) \
                and not isinstance(data.get("timeout_seconds"), bool):
            data = {**data, "timeout_seconds": float(data["timeout_seconds"])}
        return data

    @model_validator(mode="after")
    def _command_or_url(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError('give either "command" (a program to run) or "url" (a server over HTTP)')
        kind = self.kind
        if self.command and kind != "stdio":
            raise ValueError(f'"transport" {self.transport or self.type!r} needs a "url", not a "command"')
        if self.url and kind == "stdio":
            raise ValueError('"transport" "stdio" needs a "command", not a "url"')
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f'"url" must start with http:// or https://, got {self.url!r}')
        return self

    @property
    def kind(self) -> Literal["stdio", "http", "sse"]:
        """How the server is reached: ``stdio``, ``http`` (Streamable HTTP) or ``sse``."""
        given = self.transport or self.type
        if given == "stdio" or (given is None and self.command):
            return "stdio"
        return "sse" if given == "sse" else "http"

    def default_chats(self) -> list[str] | None:
        """``chats`` as given, or None meaning the default (admins' private chats for stdio, every chat for URLs)."""
        return self.chats


def check_servers(value: dict[str, Any]) -> dict[str, McpServerConfig]:
    """Validate every entry; raise ValueError naming the server (and the key) at fault."""
    if not isinstance(value, dict):
        raise ValueError("expected an object of named servers")
    out: dict[str, McpServerConfig] = {}
    for name, entry in value.items():
        if not SERVER_NAME.match(name) or "__" in name:
            raise ValueError(f"server name {name!r}: use 1-30 letters, digits, '-' or single '_'")
        if isinstance(entry, McpServerConfig):
            out[name] = entry
            continue
        if not isinstance(entry, dict):
            raise ValueError(f"server {name!r}: expected an object")
        try:
            out[name] = McpServerConfig.model_validate(entry)
        except ValidationError as exc:  # one line naming the key
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err.get("loc", ()))
            if err.get("type") == "extra_forbidden":
                import difflib

                key = str(err["loc"][-1])
                hint = difflib.get_close_matches(key, list(McpServerConfig.model_fields), n=1, cutoff=0.6)
                tail = f"; did you mean {hint[0]}?" if hint else ""
                raise ValueError(f"server {name!r}: unknown key {key!r}{tail}") from None
            msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
            raise ValueError(f"server {name!r}" + (f": {loc}" if loc else "") + f": {msg}") from None
    return out


def server_secrets(servers: dict[str, McpServerConfig]) -> set[str]:
    """Every value of every server's ``env`` and ``headers`` (for the log redactor)."""
    found: set[str] = set()
    for entry in servers.values():
        for key in SECRET_FIELDS:
            for value in (entry.env if key == "env" else entry.headers).values():
                found.add(value)
                # "Bearer <token>": the token alone may be logged by a library too
                head, _, tail = value.partition(" ")
                if tail and head.lower() in ("bearer", "basic", "token"):
                    found.add(tail)
    return found


def mask_servers(servers: dict[str, Any], mask) -> dict[str, Any]:
    """``mcp_servers`` as JSON for display, each ``env`` and ``headers`` value replaced by ``mask(value)``."""
    out: dict[str, Any] = {}
    for name, entry in servers.items():
        if isinstance(entry, dict):
            try:
                entry = McpServerConfig.model_validate(entry)
            except ValueError:
                entry = dict(entry)
        data = entry.model_dump(exclude_defaults=True) if isinstance(entry, BaseModel) else dict(entry)
        for key in SECRET_FIELDS:
            if isinstance(data.get(key), dict):
                data[key] = {k: mask(v) for k, v in data[key].items()}
        out[name] = data
    return out


def unmask_servers(new: Any, old: dict[str, Any], mask) -> Any:
    """``new`` (as edited in a form that showed ``old`` masked) with each masked ``env``/``headers`` value put
    back to the secret it stands for: an untouched masked field keeps its secret."""
    if not isinstance(new, dict):
        return new
    out: dict[str, Any] = {}
    for name, entry in new.items():
        before = old.get(name)
        if isinstance(entry, dict) and before is not None:
            before_data = before.model_dump() if isinstance(before, BaseModel) else before
            entry = dict(entry)
            for key in SECRET_FIELDS:
                values, kept = entry.get(key), before_data.get(key) or {}
                if isinstance(values, dict):
                    entry[key] = {k: kept[k] if k in kept and v == mask(kept[k]) else v for k, v in values.items()}
        out[name] = entry
    return out


def added_secrets(new: Any, old: Any) -> bool:
    """Whether ``new`` holds an ``env`` or ``headers`` value that ``old`` does not (a secret typed in)."""
    def values(servers: Any) -> set[str]:
        found: set[str] = set()
        for entry in (servers or {}).values() if isinstance(servers, dict) else ():
            data = entry.model_dump() if isinstance(entry, BaseModel) else entry
            for key in SECRET_FIELDS:
                if isinstance(data, dict) and isinstance(data.get(key), dict):
                    found.update(str(v) for v in data[key].values())
        return found
    return bool(values(new) - values(old))
