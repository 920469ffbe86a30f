"""The weixin login: what is kept in ``data_dir`` between runs, and the QR login that gets it.

Kept, owner-only (0600), written atomically:

- ``weixin_account.json``: the bot token, the API base URL WeChat gave with it, the bot's and the owner's ids.
  With it a restart needs no scan. It is deleted when WeChat ends the session (errcode -14).
- ``weixin_cursor.json``: the long poll's cursor (``get_updates_buf``), saved only once every message of the
  batch it confirms is journalled (see :mod:`channels.weixin.channel`).
- ``weixin_qr.png``: the current login QR code while a login waits (deleted once it is confirmed).

The QR login moves through :class:`LoginState`: ``waiting`` (shown, not scanned) -> ``scanned`` (confirm on
the phone) -> ``confirmed``; an ``expired`` code is replaced by a fresh one at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import sys
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

import segno

from channels.weixin.client import ILinkClient, ILinkError, QrCode
from config.settings import atomic_write_json

logger = logging.getLogger(__name__)

ACCOUNT_FILE = "weixin_account.json"
CURSOR_FILE = "weixin_cursor.json"
QR_FILE = "weixin_qr.png"
#: how many QR codes in a row are announced at WARNING
LOUD_CODES = 3


class LoginState(StrEnum):
    """Where the QR login stands."""

    LOGGED_OUT = "logged_out"
    WAITING = "waiting"
    SCANNED = "scanned"
    CONFIRMED = "confirmed"
    EXPIRED = "expired"


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
        """WeChat ended the session: the token and the cursor are of no use any more."""
        self.account_path.unlink(missing_ok=True)
        self.cursor_path.unlink(missing_ok=True)

    def load_cursor(self) -> str:
        """The saved cursor ("" to start from what the server holds for a new poller)."""
        try:
            return str(json.loads(self.cursor_path.read_text(encoding="utf-8")).get("get_updates_buf", ""))
        except (OSError, ValueError, AttributeError):
            return ""

    def save_cursor(self, cursor: str) -> None:
        """Keep the cursor (owner-only, atomic)."""
        atomic_write_json(self.cursor_path, {"get_updates_buf": cursor})


def qr_text(content: str) -> str:
    """The QR code of ``content`` as text for a terminal (half blocks)."""
    out = io.StringIO()
    segno.make(content, error="L").terminal(out=out, compact=True)
    return out.getvalue()


class QrLogin:
    """One QR login at one API base URL: show a code, follow its status, replace it when it expires."""

    #: seconds between status polls when the server answers at once
    poll_interval = 1.0

    def __init__(self, client: ILinkClient, files: LoginFiles) -> None:
        self.client = client
        self.files = files
        self.state = LoginState.LOGGED_OUT
        #: what the current QR code shows (for the web console), "" when none
        self.qr_content = ""
        #: how many QR codes this login has shown
        self.codes_shown = 0

    async def run(self) -> Account:
        """Log in: returns the confirmed account. Network errors propagate (the caller backs off)."""
        code = await self._new_code()
        status_client = self.client
        while True:
            answer = await status_client.qrcode_status(code.qrcode)
            status = str(answer.get("status") or "wait")
            if status == "confirmed":
                return self._confirmed(answer)
            if status == "scaned" and self.state is not LoginState.SCANNED:
                self.state = LoginState.SCANNED
                logger.info("weixin: QR code scanned; confirm the login on the phone")
            elif status == "expired":
                self.state = LoginState.EXPIRED
                logger.log(self._level(), "weixin: the QR code expired; here is a fresh one")
                code = await self._new_code()
                status_client = self.client
                continue
            elif status == "scaned_but_redirect" and answer.get("redirect_host"):
                status_client = ILinkClient(self.client.session, f"https://{answer['redirect_host']}")
            await asyncio.sleep(self.poll_interval)

    async def _new_code(self) -> QrCode:
        code = await self.client.get_qrcode()
        self.state, self.qr_content = LoginState.WAITING, code.content
        self.codes_shown += 1
        self._show(code.content)
        return code

    def _confirmed(self, answer: dict) -> Account:
        token = str(answer.get("bot_token") or "")
        if not token:
            raise ILinkError("get_qrcode_status", -1, -1, "confirmed without a bot token")
        account = Account(bot_token=token, base_url=str(answer.get("baseurl") or self.client.base_url),
                          bot_id=str(answer.get("ilink_bot_id") or ""), user_id=str(answer.get("ilink_user_id") or ""))
        self.files.save_account(account)
        self.state, self.qr_content = LoginState.CONFIRMED, ""
        self.files.qr_path.unlink(missing_ok=True)
        logger.info("weixin: logged in as bot %s; the login is kept in %s", account.bot_id or "?",
                    self.files.account_path)
        return account

    def _level(self) -> int:
        """WARNING for the first few codes; then INFO, so a bot left waiting for a scan does not flood the log
        with a code every few minutes (the terminal and the PNG always show the current one)."""
        return logging.WARNING if self.codes_shown <= LOUD_CODES else logging.INFO

    def _show(self, content: str) -> None:
        """Draw the code in the terminal, save it as PNG, and say in the log where to find it."""
        with contextlib.suppress(OSError):
            self.files.data_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.files.qr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # owner-only from the start
            with os.fdopen(fd, "wb") as out:
                segno.make(content, error="L").save(out, kind="png", scale=6)
        stream = sys.stdout if sys.stdout.isatty() else sys.stderr
        try:
            stream.write(qr_text(content))
            stream.flush()
        except (UnicodeEncodeError, OSError, ValueError):
            logger.info("weixin: cannot draw the QR code on this terminal; open %s instead", self.files.qr_path)
        logger.log(self._level(), "weixin: scan the QR code with the WeChat app and confirm, to connect the bot "
                   "(ClawBot); also saved as %s; link: %s", self.files.qr_path, content)
