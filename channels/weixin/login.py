"""The weixin login: what is kept in ``data_dir`` between runs, and the QR login that gets it.

Kept, owner-only (0600), written atomically:

- ``weixin_account.json``: the bot token, the API base URL WeChat gave with it, the bot's and the owner's ids.
  With it a restart needs no scan. It is deleted when WeChat ends the session (errcode -14).
- ``weixin_cursor.json``: the long poll's cursor (``get_updates_buf``), saved only once every message of the
  batch it confirms is journalled (see :mod:`channels.weixin.channel`), and each user's newest context token.
- ``weixin_qr.png``: the current login QR code while a login waits (deleted once it is confirmed).
- ``weixin_earlier_logins.json``: the logins WeChat ended (newest first, at most 9): a QR code request names their
  tokens (``local_token_list``), and ``binded_redirect`` takes the newest back into use.

The QR login follows the statuses of Tencent's plugin (``src/auth/login-qr.ts``) through :class:`LoginState`:
``waiting`` (shown, not scanned) -> ``scanned`` (confirm on the phone) -> ``confirmed``. On the way:

- ``expired``: a fresh code at once;
- ``need_verifycode``: the phone shows a number; it is asked for (in the terminal and the web console) and sent
  back as ``verify_code`` with the next status polls; asked again when it was wrong (``need_verifycode`` again),
  until ``scaned`` says it was right;
- ``verify_code_blocked``: too many wrong numbers: said once, no more asking, and a fresh code (as the plugin);
- ``scaned_but_redirect``: the status is polled at the ``redirect_host`` WeChat names from then on;
- ``binded_redirect``: this bot is connected already: the login kept here stays in use (without one, a fresh code);
- ``confirmed`` without ``ilink_bot_id`` (or without a token) is a failed login (:class:`LoginFailed`).

:class:`LoginFlow` is the channel's side of it: the login kept in ``data_dir``, else QR logins until one is
confirmed, the number the phone shows (:mod:`channels.weixin.verify`), and what the console sees of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import segno

from channels.weixin.client import LOCAL_TOKENS, ILinkClient, ILinkError, QrCode
from channels.weixin.verify import VerifyCode
from config.settings import atomic_write_json

if TYPE_CHECKING:
    import aiohttp

logger = logging.getLogger(__name__)

ACCOUNT_FILE = "weixin_account.json"
CURSOR_FILE = "weixin_cursor.json"
QR_FILE = "weixin_qr.png"
EARLIER_FILE = "weixin_earlier_logins.json"
#: how many QR codes in a row are announced at WARNING
LOUD_CODES = 3


class LoginState(StrEnum):
    """Where the QR login stands."""

    LOGGED_OUT = "logged_out"
    WAITING = "waiting"
    SCANNED = "scanned"
    #: the phone shows a number that must be entered here (the terminal or the web console)
    NEED_CODE = "need_code"
    #: too many wrong numbers: WeChat blocks this login for a while
    BLOCKED = "blocked"
    CONFIRMED = "confirmed"
    EXPIRED = "expired"


class LoginFailed(ILinkError):
    """WeChat confirmed a login without what the bot needs (its ``ilink_bot_id`` or token): the login failed."""


#: asks for the number the phone shows: (True when the last one was wrong) -> the number typed
AskCode = Callable[[bool], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Account:
    """What a confirmed login gives: the bot token and where to use it."""

    bot_token: str
    base_url: str
    bot_id: str = ""
    user_id: str = ""

    def __repr__(self) -> str:  # never the token, not even in a traceback's locals
        return f"Account(bot_id={self.bot_id!r}, base_url={self.base_url!r})"


class LoginFiles:
    """The weixin channel's files in ``data_dir``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    @property
    def account_path(self) -> Path:
        """The saved login."""
        return self.data_dir / ACCOUNT_FILE

    @property
    def cursor_path(self) -> Path:
        """The saved long-poll cursor."""
        return self.data_dir / CURSOR_FILE

    @property
    def qr_path(self) -> Path:
        """The QR code as PNG while a login waits."""
        return self.data_dir / QR_FILE

    def load_account(self) -> Account | None:
        """The saved login, or None (none saved, or a file that cannot be read: then a new scan)."""
        try:
            data = json.loads(self.account_path.read_text(encoding="utf-8"))
            account = Account(bot_token=str(data["bot_token"]), base_url=str(data["base_url"]),
                              bot_id=str(data.get("bot_id", "")), user_id=str(data.get("user_id", "")))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("weixin: cannot read %s (%s); a new login is needed", self.account_path,
                           type(exc).__name__)
            return None
        return account if account.bot_token and account.base_url else None

    def save_account(self, account: Account) -> None:
        """Keep the login for the next start (owner-only)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.account_path, asdict(account))

    def forget_account(self) -> None:
        """WeChat ended the session: the token and the cursor are of no use any more. The token is remembered
        among the earlier ones, which the next QR code request names (``local_token_list``, as the plugin, which
        keeps its accounts' tokens, does)."""
        account = self.load_account()
        if account is not None:
            earlier = [account, *(a for a in self.earlier_accounts() if a.bot_token != account.bot_token)]
            with contextlib.suppress(OSError):
                atomic_write_json(self.earlier_path, [asdict(a) for a in earlier[:LOCAL_TOKENS - 1]])
        self.account_path.unlink(missing_ok=True)
        self.cursor_path.unlink(missing_ok=True)

    @property
    def earlier_path(self) -> Path:
        """The logins WeChat ended, newest first."""
        return self.data_dir / EARLIER_FILE

    def earlier_accounts(self) -> list[Account]:
        """The logins WeChat ended, newest first ([] when none, or the file cannot be read)."""
        try:
            data = json.loads(self.earlier_path.read_text(encoding="utf-8"))
            return [Account(bot_token=str(d["bot_token"]), base_url=str(d["base_url"]), bot_id=str(d.get("bot_id", "")),
                            user_id=str(d.get("user_id", ""))) for d in data if d.get("bot_token")]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return []

    def local_tokens(self) -> list[str]:
        """The bot tokens kept here, newest first, at most :data:`LOCAL_TOKENS` (for ``local_token_list``)."""
        kept = self.load_account()
        tokens = [kept.bot_token] if kept is not None else []
        tokens += [a.bot_token for a in self.earlier_accounts() if a.bot_token not in tokens]
        return tokens[:LOCAL_TOKENS]

    def load_cursor(self) -> str:
        """The saved cursor ("" to start from what the server holds for a new poller)."""
        try:
            return str(json.loads(self.cursor_path.read_text(encoding="utf-8")).get("get_updates_buf", ""))
        except (OSError, ValueError, AttributeError):
            return ""

    def save_cursor(self, cursor: str, context_tokens: dict[str, tuple[str, float]] | None = None) -> None:
        """Keep the cursor and each user's newest context token with its time (owner-only, atomic; one write
        per batch for both)."""
        tokens = {user: {"token": token, "at": at} for user, (token, at) in (context_tokens or {}).items()}
        # compact, through json's C encoder (an indented json.dump runs in Python: about 1 ms at 50 users)
        write_compact_json(self.cursor_path, {"get_updates_buf": cursor, "context_tokens": tokens})

    def load_tokens(self) -> dict[str, tuple[str, float]]:
        """Each user's newest context token and when it came, as :meth:`save_cursor` kept them."""
        try:
            saved = json.loads(self.cursor_path.read_text(encoding="utf-8")).get("context_tokens") or {}
            items = list(saved.items())
        except (OSError, ValueError, AttributeError):
            return {}
        tokens: dict[str, tuple[str, float]] = {}
        for user, entry in items:
            try:
                if entry["token"]:
                    tokens[str(user)] = (str(entry["token"]), float(entry.get("at", 0)))
            except (TypeError, KeyError, ValueError, AttributeError):
                continue
        return tokens


def write_compact_json(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` as compact JSON, atomically and durably (owner-only temporary file in the same
    folder, fsync, ``os.replace``)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(json.dumps(data, ensure_ascii=False, separators=(",", ":")))  # dumps: the C encoder
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def qr_text(content: str) -> str:
    """The QR code of ``content`` as text for a terminal (half blocks)."""
    out = io.StringIO()
    segno.make(content, error="L").terminal(out=out, compact=True)
    return out.getvalue()


def scan_instruction(qr_path: Path) -> str:
    """The one plain line printed below the QR code in the terminal."""
    return (f"Scan this QR code with WeChat on your phone and confirm, to connect the bot "
            f"(the code is also saved as {qr_path}).")


class QrLogin:
    """One QR login at one API base URL: show a code, follow its status, replace it when it expires."""

    #: seconds between status polls when the server answers at once
    poll_interval = 1.0

    def __init__(self, client: ILinkClient, files: LoginFiles, ask_code: AskCode | None = None,
                 terminal: bool = False) -> None:
        self.client = client
        self.files = files
        self.ask_code = ask_code
        #: the QR code is drawn with its instruction on a terminal the operator watches (else on stderr)
        self.terminal = terminal
        self.state = LoginState.LOGGED_OUT
        #: what the current QR code shows (for the web console), "" when none
        self.qr_content = ""
        #: how many QR codes this login has shown
        self.codes_shown = 0

    async def run(self) -> Account:
        """Log in: returns the confirmed account. Network errors and :class:`LoginFailed` propagate (the caller
        backs off and starts again)."""
        code = await self._new_code()
        status_client = self.client
        verify_code = ""  # the number typed, sent with each poll until WeChat says it was right
        while True:
            answer = await status_client.qrcode_status(code.qrcode, verify_code)
            status = str(answer.get("status") or "wait")
            if status == "confirmed":
                return self._confirmed(answer)
            if status == "scaned":
                if verify_code:
                    verify_code = ""
                    logger.info("weixin: the number was right; confirm the login on the phone")
                if self.state is not LoginState.SCANNED:
                    self.state = LoginState.SCANNED
                    logger.info("weixin: QR code scanned; confirm the login on the phone")
            elif status == "need_verifycode":
                verify_code = await self._ask(wrong=bool(verify_code))
                continue  # the plugin polls again at once
            elif status == "verify_code_blocked":
                verify_code = ""
                self.state = LoginState.BLOCKED
                logger.warning("weixin: WeChat blocked this login after too many wrong numbers; wait a while, "
                               "then scan the fresh QR code")
                code, status_client = await self._new_code(), self.client
                continue
            elif status == "expired":
                self.state = LoginState.EXPIRED
                logger.log(self._level(), "weixin: the QR code expired; here is a fresh one")
                code, status_client = await self._new_code(), self.client
                continue
            elif status == "scaned_but_redirect":
                status_client = self._redirected(status_client, str(answer.get("redirect_host") or ""))
            elif status == "binded_redirect":
                kept = self.files.load_account() or next(iter(self.files.earlier_accounts()), None)
                if kept is not None:
                    logger.info("weixin: WeChat says this bot is connected already; the login kept in %s is used",
                                self.files.data_dir)
                    self.files.save_account(kept)
                    self._done()
                    return kept
                logger.warning("weixin: WeChat says this WeChat account is connected to this bot already, but no "
                               "login is kept in %s; scan the fresh QR code", self.files.data_dir)
                code, status_client = await self._new_code(), self.client
            await asyncio.sleep(self.poll_interval)

    async def _ask(self, wrong: bool) -> str:
        """The number the phone shows, asked for (again, when ``wrong``)."""
        self.state = LoginState.NEED_CODE
        if self.ask_code is None:
            raise LoginFailed("get_qrcode_status", -1, -1, "WeChat asks for the number the phone shows, and "
                              "nothing here can ask for it")
        return (await self.ask_code(wrong)).strip()

    def _redirected(self, client: ILinkClient, host: str) -> ILinkClient:
        """Where the status is polled after ``scaned_but_redirect``: ``redirect_host``, with the scheme in use."""
        if not host:
            logger.warning("weixin: WeChat asked to poll the login elsewhere without saying where; polling on")
            return client
        scheme = urlsplit(self.client.base_url).scheme or "https"
        logger.info("weixin: WeChat moved the login to %s", host)
        return ILinkClient(self.client.session, f"{scheme}://{host}")

    async def _new_code(self) -> QrCode:
        code = await self.client.get_qrcode(self.files.local_tokens())
        self.state, self.qr_content = LoginState.WAITING, code.content
        self.codes_shown += 1
        self._show(code.content)
        return code

    def _confirmed(self, answer: dict) -> Account:
        token, bot_id = str(answer.get("bot_token") or ""), str(answer.get("ilink_bot_id") or "")
        if not bot_id or not token:
            self.state = LoginState.LOGGED_OUT
            missing = "ilink_bot_id" if not bot_id else "bot_token"
            raise LoginFailed("get_qrcode_status", -1, -1, f"WeChat confirmed the login without its {missing}")
        account = Account(bot_token=token, base_url=str(answer.get("baseurl") or self.client.base_url),
                          bot_id=bot_id, user_id=str(answer.get("ilink_user_id") or ""))
        self.files.save_account(account)
        self._done()
        logger.info("weixin: logged in as bot %s; the login is kept in %s", account.bot_id, self.files.account_path)
        return account

    def _done(self) -> None:
        self.state, self.qr_content = LoginState.CONFIRMED, ""
        self.files.qr_path.unlink(missing_ok=True)

    def _level(self) -> int:
        """WARNING for the first few codes; then INFO, so a bot left waiting for a scan does not flood the log
        with a code every few minutes (the terminal and the PNG always show the current one)."""
        return logging.WARNING if self.codes_shown <= LOUD_CODES else logging.INFO

    def _show(self, content: str) -> None:
        """Draw the code, save it as PNG, and say where to find it: on a terminal the operator watches, one plain
        instruction line below the code (the log line goes to bot.log only); else in the log."""
        with contextlib.suppress(OSError):
            self.files.data_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.files.qr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # owner-only from the start
            with os.fdopen(fd, "wb") as out:
                segno.make(content, error="L").save(out, kind="png", scale=6)
        stream = sys.stdout if self.terminal or sys.stdout.isatty() else sys.stderr
        try:
            stream.write(qr_text(content))
            if self.terminal:
                stream.write(scan_instruction(self.files.qr_path) + "\n")
            stream.flush()
        except (UnicodeEncodeError, OSError, ValueError):
            logger.info("weixin: cannot draw the QR code on this terminal; open %s instead", self.files.qr_path)
        level = logging.INFO if self.terminal else self._level()
        logger.log(level, "weixin: scan the QR code with the WeChat app and confirm, to connect the bot "
                   "(ClawBot); also saved as %s; link: %s", self.files.qr_path, content)


class LoginFlow:
    """The weixin channel's login: the one kept in ``data_dir``, else QR logins tried again until one is
    confirmed, the number the phone shows (:attr:`verify`), and the QR code and state the web console shows."""

    def __init__(self, files: LoginFiles, base_url: str, *, terminal: Callable[[], bool],
                 console: Callable[[], bool]) -> None:
        self.files = files
        self.base_url = base_url
        #: the number the login waits for (typed in the terminal or the web console)
        self.verify = VerifyCode()
        #: the QR login in progress, or the last one (its state is shown by the web console)
        self.qr: QrLogin | None = None
        #: the operator watches this terminal (the channel's ``terminal``); the web console runs
        self._terminal, self._console = terminal, console

    def kept(self, session: aiohttp.ClientSession) -> ILinkClient | None:
        """The API with the login kept in ``data_dir``; None when there is none."""
        account = self.files.load_account()
        return None if account is None else ILinkClient(session, account.base_url, account.bot_token)

    def qr_svg(self) -> str | None:
        """The current QR code as an SVG ``data:`` URL; None when none is shown."""
        qr = self.qr
        if qr is None or not qr.qr_content:
            return None
        return segno.make(qr.qr_content, error="L").svg_data_uri(scale=6)

    @property
    def state(self) -> LoginState:
        """Where the last QR login stands (logged out before the first)."""
        return self.qr.state if self.qr is not None else LoginState.LOGGED_OUT

    async def log_in(self, session: aiohttp.ClientSession,
                     reaching: Callable[[Callable[[], Awaitable[Account]]], Awaitable[Any]]) -> ILinkClient:
        """QR logins until one is confirmed: ``reaching(call)`` retries one while WeChat cannot be reached; a
        failed login (:class:`LoginFailed`) is one line and a fresh code at once. The API with its token."""
        while True:
            try:
                account: Account = await reaching(lambda: self._qr_login(session))
                break
            except LoginFailed as exc:
                logger.error("weixin: the login failed (%s); scan the fresh QR code to try again", exc.errmsg)
        if self._terminal():
            news = f"WeChat: logged in as bot {account.bot_id}; the bot answers messages sent to it."
            print(news, flush=True)  # noqa: T201 - the terminal's news after the QR code
        return ILinkClient(session, account.base_url, account.bot_token)

    async def _qr_login(self, session: aiohttp.ClientSession) -> Account:
        self.qr = QrLogin(ILinkClient(session, self.base_url), self.files, self._ask_code, self._terminal())
        return await self.qr.run()

    async def _ask_code(self, wrong: bool) -> str:
        return await self.verify.ask(wrong, terminal=self._terminal(), console=self._console())
