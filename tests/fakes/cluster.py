"""Several ``python app.py`` processes on one PostgreSQL database, against one fake Bot API and one fake model.

A :class:`Cluster` runs N bot processes (:class:`tests.fakes.bot_process.BotProcess`) in webhook or polling
mode, all on one database and one shared ``data_dir``, and lets a test or a benchmark kill one with
``kill -9``, restart it, send numbered chat messages, wait for the replies to settle and count them
(:mod:`tests.fakes.tally`).

Webhook mode: every process listens on its own port. The fake Bot API delivers each update to the next
target round robin (the processes' own URLs, or one load balancer URL given to :meth:`route_webhooks`),
one chat's updates in order, and redelivers to the next target when a delivery fails
(:mod:`tests.fakes.webhooks`). With ``shared_config`` every process reads one ``config.json`` (as a
deployment does) and gets its port from the ``TELEGRAM_WEBHOOK_PORT`` environment variable; without it,
each process has its own config file naming its own port.

Polling mode: the fake Bot API records which process made each ``getUpdates`` call
(:attr:`FakeTelegramAPI.pollers`, resolved from the client's TCP port to a process id through ``/proc``), and,
like Telegram, answers 409 Conflict to a long poll that a newer one from elsewhere replaces.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.fakes.bot_process import ROOT, BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.tally import Tally, message_text, replies_by_chat, tally
from tests.fakes.telegram_api import FakeTelegramAPI

#: the user id of the admin (its private chat is the same number)
ADMIN_ID = 99
WEBHOOK_PATH = "telegram"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def webhook_port_env_supported() -> bool:
    """Whether this checkout's app reads ``TELEGRAM_WEBHOOK_PORT`` (only then can webhook processes share
    one config.json). Read from the source: the variable is the contract, and starting a process to find
    out would cost seconds."""
    files = [ROOT / "config/settings.py", ROOT / "app.py", *sorted((ROOT / "channels").glob("telegram*.py"))]
    return any("TELEGRAM_WEBHOOK_PORT" in f.read_text(encoding="utf-8") for f in files if f.exists())


def socket_owner(client: tuple[str, int], pids: list[int]) -> int | None:
    """Which of ``pids`` owns the TCP socket whose local port is ``client``'s (Linux ``/proc``), or None."""
    port = client[1]
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] != "0":
                        inodes.add(f"socket:[{fields[9]}]")
        except OSError:
            continue
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return pid
    return None


@contextlib.contextmanager
def fresh_schema(database_url: str) -> Iterator[str]:
    """An empty schema in the PostgreSQL database ``database_url``; yields a URL that uses it, drops it after.

    The first bot started on it brings it to head in the test process (:func:`tests.fakes.bot_process.migrate`),
    unless the cluster is made with ``fresh_database=True``: then its processes migrate it themselves, at once."""
    import psycopg

    from config.settings import normalise_db_url

    scheme, rest = database_url.split("://", 1)
    libpq = "postgresql://" + rest
    schema = f"mp_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = normalise_db_url(database_url, Path("."))
    try:
        yield f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


class Cluster:
    """N bot processes sharing a database, a data folder and (optionally) config.json."""

    def __init__(self, folder: Path, api: FakeTelegramAPI, llm: FakeOpenAIServer, db_url: str, *,
                 processes: int = 2, mode: str = "webhook", shared_config: bool | None = None,
                 fresh_database: bool = False, **settings: Any) -> None:
        self.folder = folder
        self.api = api
        self.llm = llm
        self.db_url = db_url
        self.mode = mode
        if shared_config is None:
            shared_config = mode == "polling" or webhook_port_env_supported()
        if shared_config and mode == "webhook" and not webhook_port_env_supported():
            raise RuntimeError("this app.py does not read TELEGRAM_WEBHOOK_PORT, so webhook processes cannot "
                               "share one config.json (each would listen on the same port)")
        self.shared_config = shared_config
        self.ports = [free_port() for _ in range(processes)] if mode == "webhook" else []
        self.config_path = folder / "config.json"
        self.data_dir = folder / "data"
        self.settings = {
            "channel_type": "telegram", "telegram_bot_token": api.token, "telegram_base_url": api.base_url,
            "telegram_rate_limit": False, "telegram_mode": mode, "open_ai_api_base": llm.base_url,
            "model_max_parallel": 1000,  # the fake stands in for a remote provider: no one-slot limit
            "open_ai_api_key": "test", "data_dir": str(self.data_dir), "db_url": db_url,
            "stream_replies": False, "memory_embedding_model": "", "admin_users": [f"telegram:{ADMIN_ID}"],
            **settings}
        self.bots: list[BotProcess] = []
        for i in range(processes):
            bot = BotProcess(folder / f"bot{i}", fresh_database=fresh_database, **self._settings_for(i))
            bot.folder.mkdir(parents=True, exist_ok=True)
            if shared_config:
                bot.config_path = self.config_path
                bot.owns_config = False
                if mode == "webhook":
                    bot.extra_env["TELEGRAM_WEBHOOK_PORT"] = str(self.ports[i])
            self.bots.append(bot)
        #: (chat, index) of every numbered message sent, in order
        self.sent: list[tuple[int, int]] = []
        #: update id -> (chat, i) of the numbered messages
        self.updates: dict[int, tuple[int, int]] = {}
        self._next: dict[int, int] = {}
        #: ``time.monotonic()`` when every process was ready
        self.started_at = 0.0
        api.peer_owner = self._owner

    def _settings_for(self, i: int) -> dict[str, Any]:
        if self.mode != "webhook":
            return dict(self.settings)
        port = self.ports[0] if self.shared_config else self.ports[i]
        return {**self.settings, "telegram_webhook_url": f"http://127.0.0.1:{port}/{WEBHOOK_PATH}",
                "telegram_webhook_port": port}

    # --- lifecycle ---------------------------------------------------------------------------
    @property
    def webhook_urls(self) -> list[str]:
        """Each process's own webhook URL."""
        return [f"http://127.0.0.1:{port}/{WEBHOOK_PATH}" for port in self.ports]

    def route_webhooks(self, targets: list[str] | None = None, **options: Any) -> None:
        """Make the fake Bot API deliver to ``targets`` (default: every process's own URL, round robin)."""
        self.api.set_webhook_targets(targets or self.webhook_urls, **options)

    def start(self, timeout: float = 90) -> Cluster:
        """Start every process at once and wait until all are ready."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.shared_config:
            self.config_path.write_text(json.dumps(self._settings_for(0), indent=2), encoding="utf-8")
        if self.mode == "webhook" and self.api.webhook_router is None:
            self.route_webhooks()
        for bot in self.bots:
            bot.start(wait_for_log=None)
        for bot in self.bots:
            bot.wait_for_log("INFO app: ready:", timeout)
        self.started_at = time.monotonic()
        return self

    def kill(self, i: int) -> None:
        """``kill -9`` process ``i``."""
        self.bots[i].kill()

    def restart(self, i: int, timeout: float = 60) -> None:
        """Start process ``i`` again and wait until it is ready."""
        self.bots[i].start(timeout=timeout)

    def stop(self) -> list[int | None]:
        """SIGTERM every running process at once; their exit codes (None for one not running)."""
        codes: list[int | None] = [None] * len(self.bots)

        def stop_one(i: int) -> None:
            bot = self.bots[i]
            if bot.proc is not None and bot.proc.returncode is None:
                codes[i] = bot.stop()

        threads = [threading.Thread(target=stop_one, args=(i,)) for i in range(len(self.bots))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return codes

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- who is who --------------------------------------------------------------------------
    def pids(self) -> list[int]:
        """The running processes' ids."""
        return [bot.pid for bot in self.bots if bot.pid is not None]

    def index_of(self, pid: Any) -> int | None:
        """Which process (index) has ``pid`` now."""
        return next((i for i, bot in enumerate(self.bots) if bot.pid == pid), None)

    def _owner(self, client: tuple[str, int]) -> int | None:
        return socket_owner(client, self.pids())

    def pollers_since(self, since: float) -> list[Any]:
        """The process ids that called getUpdates since ``since`` (``time.monotonic()``), in first-call order."""
        out: list[Any] = []
        for at, owner in list(self.api.pollers):
            if at >= since and owner not in out:
                out.append(owner)
        return out

    # --- traffic -----------------------------------------------------------------------------
    def send(self, chat: int) -> tuple[int, int]:
        """Send the chat's next numbered message (``c<chat> m<i>``) from its user; returns (chat, i)."""
        i = self._next.get(chat, 0)
        self._next[chat] = i + 1
        update = self.api.push_text(chat_id(chat), message_text(chat, i), user_id=chat_id(chat),
                                    first_name=f"U{chat}")
        self.updates[update["update_id"]] = (chat, i)
        self.sent.append((chat, i))
        return chat, i

    def progress(self) -> tuple[int, int]:
        """(messages of :attr:`sent` answered at least once, answers to their chats so far)."""
        chats = {chat for chat, _ in self.sent}
        replies = {chat: indexes for chat, indexes in replies_by_chat(list(self.api.sent)).items() if chat in chats}
        answered = {(chat, i) for chat, indexes in replies.items() for i in indexes}
        return sum(key in answered for key in set(self.sent)), sum(len(v) for v in replies.values())

    def wait_settled(self, timeout: float = 30, quiet: float = 2.0) -> bool:
        """Wait until every sent message has an answer and no more answers came for ``quiet`` s, or until
        ``timeout``; True when it settled with every message answered."""
        deadline = time.monotonic() + timeout
        last, quiet_since = (-1, -1), time.monotonic()
        while time.monotonic() < deadline:
            now = self.progress()
            if now != last:
                last, quiet_since = now, time.monotonic()
            elif now[0] >= len(set(self.sent)) and time.monotonic() - quiet_since >= quiet:
                return True
            time.sleep(0.1)
        return False

    def tally(self) -> Tally:
        """Count what was sent against what the bots answered."""
        return tally(self.sent, list(self.api.sent))

    def logs(self, i: int) -> str:
        """Everything process ``i`` wrote to stderr, over all its runs."""
        files = sorted(self.bots[i].folder.glob("stderr.*.txt"), key=lambda p: int(p.name.split(".")[1]))
        return "".join(p.read_text(encoding="utf-8", errors="replace") for p in files)

    def count_in_logs(self, needle: str) -> list[int]:
        """Per process, how many log lines contain ``needle``."""
        return [sum(needle in line for line in self.logs(i).splitlines()) for i in range(len(self.bots))]


def chat_id(chat: int) -> int:
    """The Telegram chat (and user) id of load chat number ``chat``."""
    return 1000 + chat
