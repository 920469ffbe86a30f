"""The configuration: a validated pydantic model of config.json.

Keys follow chatgpt-on-wechat. An unknown key or a wrong type fails with one line that names the key
(and suggests the nearest known key). Secrets may come from the environment, which wins over the file.
Relative paths resolve against the config file's folder.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

import config.cowagent
from config.mcp_servers import McpServerConfig, check_servers, mask_servers, server_secrets, unmask_servers
from core.errors import ConfigError
from core.files import atomic_write
from core.suggest import did_you_mean, nearest

logger = logging.getLogger(__name__)

DEFAULT_API_BASE = "https://api.openai.com/v1"
DEFAULT_PERSONA = (
    "You are a helpful, concise assistant in a chat app. You remember the conversation, use tools "
    "when they help, and answer in the language the user writes in."
)

#: Environment variables that override keys of the file.
ENV_OVERRIDES = {
    "OPENAI_API_KEY": "open_ai_api_key",
    "OPENAI_BASE_URL": "open_ai_api_base",
    "TELEGRAM_BOT_TOKEN": "telegram_bot_token",
    "TELEGRAM_WEBHOOK_PORT": "telegram_webhook_port",  # several processes sharing one config.json
    "WEB_CONSOLE_PASSWORD": "web_console_password",
}
#: Keys whose values are masked wherever they are shown.
SECRET_KEYS = frozenset({"open_ai_api_key", "telegram_bot_token", "admin_password", "web_console_password",
                         "wecom_secret", "wecom_token", "wecom_aes_key",
                         "feishu_app_secret", "dingtalk_client_secret"})
#: Keys that take effect only after a restart.
RESTART_KEYS = frozenset({
    "channel_type", "db_url", "data_dir", "telegram_bot_token", "telegram_base_url", "telegram_mode",
    "telegram_webhook_url", "telegram_webhook_listen", "telegram_webhook_port", "telegram_rate_limit",
    "wechat_hot_reload", "open_ai_api_key", "open_ai_api_base", "max_concurrent_turns", "azure_api_version",
    "weixin_base_url", "feishu_app_id", "feishu_app_secret", "feishu_domain", "dingtalk_client_id",
    "dingtalk_client_secret",
    "web_console_port", "web_console_listen",
    "wecom_corp_id", "wecom_agent_id", "wecom_secret", "wecom_token", "wecom_aes_key", "wecom_port",
    "wecom_base_url",
    "model_max_parallel",
})

#: The longest value /config accepts, in characters (the persona is the longest setting in practice).
MAX_VALUE_CHARS = 20_000


def secret_refusal(key: str) -> str:
    """Why a secret cannot be set from a chat, and how to set it instead."""
    env = next((var for var, k in ENV_OVERRIDES.items() if k == key), None)
    how = f"set the {env} environment variable or edit config.json by hand" if env else \
        "edit config.json by hand"
    when = "; it takes effect after a restart" if key in RESTART_KEYS else ""
    return (f"{key} is a secret and cannot be set from a chat, where the platform and the bot's journal would "
            f"keep it: {how}{when}")


def endpoint_refused_hint(base: str) -> str:
    """The one line for a model endpoint that refuses the connection (used at start and in chat replies)."""
    return (f"The model endpoint {base} refused the connection: check that the model server is running and that "
            "open_ai_api_base in config.json points at it.")


def endpoint_not_found_hint(base: str) -> str:
    """The one line for an endpoint that answers 404 for the chat-completions path itself."""
    return (f"The model endpoint {base} answered 404 Not Found for /chat/completions: does open_ai_api_base in "
            "config.json end in /v1 (e.g. http://127.0.0.1:8080/v1)?")


def endpoint_unresolved_hint(base: str) -> str:
    """The one line for an endpoint whose host name does not resolve."""
    host = urlsplit(base).hostname or base
    return (f"The host name {host!r} of the model endpoint {base} does not resolve: check open_ai_api_base in "
            "config.json for a typo, and the network.")


def unknown_model_hint(model: str, base: str) -> str:
    """The one line for a model name the endpoint does not know."""
    return (f"The model {model!r} is not available at {base}: check the model setting in config.json "
            "(the endpoint's /models list names the ones it has).")


#: A channel name; the channel registry (channels/registry.py) says which exist.
ChannelName = str


class Config(BaseModel):
    """Every key of config.json, with its default."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)

    channel_type: ChannelName | list[ChannelName] = "terminal"
    model: str = "gpt-4o-mini"
    open_ai_api_key: str = ""
    open_ai_api_base: str = DEFAULT_API_BASE
    summary_model: str = ""
    model_context_window: int = Field(0, ge=0)
    character_desc: str = DEFAULT_PERSONA
    agent_max_context_tokens: int = Field(50000, ge=1000)
    agent_max_context_turns: int = Field(20, ge=1)
    agent_max_steps: int = Field(15, ge=1)
    single_chat_prefix: list[str] = Field(default_factory=lambda: [""])
    single_chat_reply_prefix: str = ""
    group_chat_prefix: list[str] = Field(default_factory=lambda: ["@bot"])
    group_chat_keyword: list[str] = Field(default_factory=list)
    group_at_off: bool = False
    group_name_white_list: list[str] = Field(default_factory=lambda: ["ALL_GROUP"])
    group_shared_session: bool = False
    group_chat_reply_prefix: str = ""
    admin_users: list[str] = Field(default_factory=list)
    admin_password: str = ""
    telegram_bot_token: str = ""
    telegram_base_url: str = "https://api.telegram.org/bot"
    telegram_mode: Literal["polling", "webhook"] = "polling"
    telegram_rate_limit: bool = True
    telegram_webhook_url: str = ""
    telegram_webhook_listen: str = "127.0.0.1"
    telegram_webhook_port: int = Field(8443, ge=1, le=65535)
    wechat_hot_reload: bool = True
    weixin_base_url: str = "https://ilinkai.weixin.qq.com"
    data_dir: str = "data"
    db_url: str = ""
    conversation_max_age_days: int = Field(30, ge=1)
    cleanup_hour: int = Field(3, ge=0, le=23)
    timezone: str = ""
    web_fetch_allow_private: bool = False
    max_concurrent_turns: int = Field(64, ge=1)
    agent_max_output_tokens: int = Field(0, ge=0)
    stream_replies: bool = True
    group_context_messages: int = Field(20, ge=0)
    memory_embedding_model: str = "local"
    memory_flush: bool = False
    azure_api_version: str = ""
    plugins: dict[str, dict[str, Any]] = Field(default_factory=dict)
    web_console_port: int = Field(8700, ge=0, le=65535)
    web_console_listen: str = "127.0.0.1"
    web_console_password: str = ""
    model_max_parallel: int = Field(0, ge=0)
    vision: bool | Literal["auto"] = "auto"
    speech_to_text_model: str = "whisper-1"
    usage_cap_user_daily_tokens: int = Field(0, ge=0)
    usage_cap_group_daily_tokens: int = Field(0, ge=0)
    usage_cap_daily_tokens: int = Field(0, ge=0)
    usage_fallback_model: str = ""
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    tools_window_share: float = Field(0.15, gt=0, le=1)

    feishu_app_id: str = ""
    feishu_app_secret: str = ""
    feishu_domain: str = "feishu"
    dingtalk_client_id: str = ""
    dingtalk_client_secret: str = ""
    wecom_corp_id: str = ""
    wecom_agent_id: str = ""
    wecom_secret: str = ""
    wecom_token: str = ""
    wecom_aes_key: str = ""
    wecom_port: int = Field(8701, ge=1, le=65535)
    wecom_base_url: str = "https://qyapi.weixin.qq.com"
    web_chat_public: bool = False
    web_chat_rate_per_minute: int = Field(6, ge=1)
    knowledge_max_mb: int = Field(50, ge=1)
    knowledge_max_pages: int = Field(2000, ge=1)
    knowledge_auto: bool = False

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _mcp_servers(cls, value: Any) -> dict[str, McpServerConfig]:
        return check_servers(value)

    @field_validator("tools_window_share", mode="before")
    @classmethod
    def _share_number(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        if value:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise ValueError(f"unknown IANA time zone {value!r}") from exc
        return value

    @field_validator("admin_users")
    @classmethod
    def _admin_format(cls, value: list[str]) -> list[str]:
        for entry in value:
            if ":" not in entry:
                raise ValueError(f"entries look like 'telegram:12345', got {entry!r}")
        return value

    # --- derived values -------------------------------------------------------------------
    @property
    def channels(self) -> list[str]:
        """The channel names to run."""
        value = self.channel_type
        return list(dict.fromkeys([value] if isinstance(value, str) else value))

    @property
    def effective_summary_model(self) -> str:
        """The model summaries use."""
        return self.summary_model or self.model

    @property
    def model_configured(self) -> bool:
        """True when a key or a custom endpoint is set."""
        return bool(self.open_ai_api_key) or self.open_ai_api_base.rstrip("/") != DEFAULT_API_BASE

    def data_path(self) -> Path:
        """The data folder (absolute once loaded from a file)."""
        return Path(self.data_dir)

    def database_url(self) -> str:
        """The SQLAlchemy URL, with the default SQLite file and async drivers filled in."""
        return normalise_db_url(self.db_url, self.data_path())

    def zone(self):
        """The configured time zone, or the system zone."""
        from datetime import datetime
        from zoneinfo import ZoneInfo

        if self.timezone:
            return ZoneInfo(self.timezone)
        return datetime.now().astimezone().tzinfo


def normalise_db_url(url: str, data_dir: Path) -> str:
    """Fill in SQLite at ``<data_dir>/chatbot.db`` and switch PostgreSQL URLs to the async psycopg driver.

    The store picks SQLite's driver itself (aiosqlite, store/engine.py); the ``sqlite+aiosqlite://``
    spelling of earlier versions is still accepted.
    """
    if not url:
        return f"sqlite:///{data_dir / 'chatbot.db'}"
    for plain in ("postgresql://", "postgres://", "postgresql+psycopg2://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain):]
    if url.startswith("sqlite+aiosqlite://"):
        return "sqlite://" + url[len("sqlite+aiosqlite://"):]
    return url


KNOWN_KEYS: tuple[str, ...] = tuple(Config.model_fields)


def suggest_key(key: str) -> str | None:
    """The nearest known key to a misspelt one, if any is close."""
    return nearest(key, KNOWN_KEYS)


def describe_error(exc: ValidationError) -> str:
    """One line naming the first bad key and what was expected."""
    err = exc.errors()[0]
    loc = [str(p) for p in err.get("loc", ())]
    key = loc[0] if loc else "?"
    if err.get("type") == "extra_forbidden":
        return f"unknown config key {key!r}{did_you_mean(key, KNOWN_KEYS)}"
    where = key if key != "plugins" else ".".join(loc[:2])
    if key == "mcp_servers":  # its validator names the server and the key at fault
        return f"invalid value for 'mcp_servers': {str(err.get('msg', 'invalid value')).removeprefix('Value error, ')}"
    expected = _expected_type(key)
    msg = err.get("msg", "invalid value")
    return f"invalid value for {where!r}: {msg} (expected {expected})"


_EXPECTED = {
    "channel_type": "a registered channel name, or a list of them",
    "telegram_mode": '"polling" or "webhook"',
    "plugins": "an object of per-plugin objects",
    "timezone": 'an IANA zone name such as "Europe/Berlin", or ""',
    "admin_users": 'a list of "<channel>:<user id>" strings',
    "mcp_servers": 'an object of named servers, each {"command": …} or {"url": …}',
    "tools_window_share": "a number above 0, at most 1",
}


def _expected_type(key: str) -> str:
    if key in _EXPECTED:
        return _EXPECTED[key]
    field = Config.model_fields.get(key)
    if field is None:
        return "a valid value"
    ann = field.annotation
    names = {str: "a string", int: "an integer", bool: "true or false", list[str]: "a list of strings"}
    if ann in names:
        return names[ann]
    text = str(ann).replace("typing.", "")
    return text


def validate_data(data: dict[str, Any]) -> Config:
    """Validate a dict of settings; raise :class:`ConfigError` with one clear line.

    Every unknown key is named at once, each with its suggestion, so a file is fixed in one pass.
    """
    if not isinstance(data, dict):
        raise ConfigError("config must be a JSON object of settings")
    unknown = [key for key in data if key not in KNOWN_KEYS]
    if len(unknown) == 1:
        raise ConfigError(f"unknown config key {unknown[0]!r}{did_you_mean(unknown[0], KNOWN_KEYS)}")
    if unknown:
        named = []
        for key in unknown:
            hint = suggest_key(key)
            named.append(f"{key!r}" + (f" (did you mean {hint}?)" if hint else ""))
        raise ConfigError("unknown config keys: " + ", ".join(named))
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_error(exc)) from None


def translate_cowagent(data: dict[str, Any], notes: list[str] | None = None) -> dict[str, Any]:
    """The settings with chatgpt-on-wechat's spellings mapped to ours (config/cowagent.py); what was mapped
    and what is ignored is appended to ``notes`` (one line each) for the log."""
    return config.cowagent.translate(data, KNOWN_KEYS, notes)


def read_file_data(path: Path) -> dict[str, Any]:
    """Read config.json as a dict (an absent file means all defaults).

    An empty file is an error, not "all defaults": editors often truncate a file before writing it, and
    applying that moment would drop every setting (admins included).
    """
    if not path.exists():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    if not text.strip():
        raise ConfigError(f"{path} is empty; write {{}} in it for all defaults")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object of settings")
    return data


def apply_environment(data: dict[str, Any], environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Return ``data`` with the environment variables of :data:`ENV_OVERRIDES` applied (they win over the file)."""
    env = os.environ if environ is None else environ
    out = dict(data)
    for var, key in ENV_OVERRIDES.items():
        if env.get(var):
            out[key] = int(env[var]) if key == "telegram_webhook_port" and env[var].isdigit() else env[var]
    return out


def resolve_paths(cfg: Config, base: Path) -> Config:
    """Make relative paths absolute against the config file's folder."""
    data_dir = Path(cfg.data_dir).expanduser()
    if not data_dir.is_absolute():
        data_dir = (base / data_dir).resolve()
    url = cfg.db_url
    prefix = "sqlite:///"
    for p in ("sqlite+aiosqlite:///", "sqlite:///"):
        if url.startswith(p):
            prefix = p
            rest = url[len(p):]
            if rest and not rest.startswith("/") and rest != ":memory:":
                url = prefix + str((base / rest).resolve())
            break
    servers = {name: entry.model_copy(update={"cwd": str((base / Path(entry.cwd).expanduser()).resolve())})
               if entry.cwd and not Path(entry.cwd).expanduser().is_absolute() else entry
               for name, entry in cfg.mcp_servers.items()}  # an MCP server's working folder
    return cfg.model_copy(update={"data_dir": str(data_dir), "db_url": url, "mcp_servers": servers})


def load_config(path: str | Path = "config.json", environ: dict[str, str] | None = None,
                notes: list[str] | None = None) -> Config:
    """Load, validate and resolve a config file. Raise :class:`ConfigError` with one clear line.

    A chatgpt-on-wechat file is accepted: what was mapped or ignored goes to ``notes``.
    """
    path = Path(path).expanduser().resolve()
    data = apply_environment(translate_cowagent(read_file_data(path), notes), environ)
    cfg = validate_data(data)
    return resolve_paths(cfg, path.parent)


def atomic_write_json(path: Path, data: dict[str, Any]) -> None:
    """Write JSON to ``path`` atomically (:func:`core.files.atomic_write`: owner-only, synced, then renamed)."""
    atomic_write(path, json.dumps(data, ensure_ascii=False, indent=2) + "\n")


#: Secrets shown only as set or not set, never in part (a short password would show most of itself).
PASSWORD_KEYS = frozenset({"admin_password", "web_console_password"})
#: A key shorter than this is shown only as set: its last 4 characters would be too large a part of it.
MIN_SHOWN_KEY_CHARS = 16


#: Keys whose values hold secrets inside them (DESIGN §1.2: ``mcp_servers``' ``env`` and ``headers``).
NESTED_SECRET_KEYS = frozenset({"mcp_servers"})


def secret_values(cfg: Config) -> set[str]:
    """Every secret value in force: the secret keys' and the nested ones (for the log redactor)."""
    return {getattr(cfg, key) for key in SECRET_KEYS} | server_secrets(cfg.mcp_servers)


def masked(key: str, value: Any) -> Any:
    """A setting's value with its nested secrets masked (the value itself for other keys)."""
    if key == "mcp_servers" and isinstance(value, dict):
        return mask_servers(value, mask_nested)
    return value


def mask_nested(value: str) -> str:
    """How a nested secret (an ``env`` or ``headers`` value of ``mcp_servers``) is shown."""
    return mask_secret("mcp_servers", value) if isinstance(value, str) else "set"


def unmasked(key: str, value: Any, current: Any) -> Any:
    """A value edited from its :func:`masked` form, with each untouched masked secret put back from ``current``."""
    if key == "mcp_servers" and isinstance(current, dict):
        return unmask_servers(value, current, mask_nested)
    return value


def mask_secret(key: str, value: str) -> str:
    """Show the secret ``key`` of ``value`` so it can be recognised, not used: a password as ``set`` or ``not set``;
    an API key or token as at most its last 4 characters (``sk-…a1b2``: ``sk-`` is OpenAI's public prefix)."""
    if not value:
        return "not set"
    if key in PASSWORD_KEYS or len(value) < MIN_SHOWN_KEY_CHARS:
        return "set"
    return f"{'sk-' if value.startswith('sk-') else ''}…{value[-4:]}"


class ConfigHolder:
    """The settings in force. Call it to get the current :class:`Config`; live changes swap it."""

    def __init__(self, config: Config, path: Path | None = None) -> None:
        self.current = config
        self.path = path
        self._listeners: list = []

    def __call__(self) -> Config:
        return self.current

    def on_change(self, listener) -> None:
        """Call ``listener(old, new)`` after every change."""
        self._listeners.append(listener)

    def replace(self, new: Config) -> list[str]:
        """Put ``new`` in force; return the keys that changed."""
        old, self.current = self.current, new
        changed = [k for k in KNOWN_KEYS if getattr(old, k) != getattr(new, k)]
        if changed:
            for listener in self._listeners:
                try:
                    listener(old, new)
                except Exception:  # noqa: BLE001 - one listener must not stop the others
                    logger.exception("config listener failed")
        return changed


# --- applying changes live ----------------------------------------------------------------------------


def live_config(new: Config, running: Config) -> tuple[Config, list[str]]:
    """What to put in force now: ``new`` with restart-only keys kept at their running values.

    Also returns the restart-only keys whose new value waits for a restart.
    """
    pending = [k for k in KNOWN_KEYS if k in RESTART_KEYS and getattr(new, k) != getattr(running, k)]
    if not pending:
        return new, []
    return new.model_copy(update={k: getattr(running, k) for k in pending}), pending
