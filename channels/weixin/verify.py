"""The number WeChat shows on the phone during a login (``need_verifycode``), asked for as the plugin does.

Tencent's plugin prompts on stdin and sends the line back as ``verify_code`` with its next status polls. Here it
is asked for in the terminal when the weixin channel owns it (it runs alone there) and on the web console's
WeChat login page (``POST /weixin/code``) at the same time; the first answer from either is the one sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys

logger = logging.getLogger(__name__)


class VerifyCode:
    """One question at a time: :meth:`ask` waits for the number, :meth:`enter` gives it (from the console)."""

    def __init__(self) -> None:
        self._wanted: asyncio.Future[str] | None = None

    @property
    def wanted(self) -> bool:
        """A login waits for the number."""
        return self._wanted is not None and not self._wanted.done()

    def enter(self, code: str) -> bool:
        """The number typed; False when it is blank or no login waits for one."""
        code = code.strip()
        if not code or not self.wanted:
            return False
        assert self._wanted is not None
        self._wanted.set_result(code)
        return True

    async def ask(self, wrong: bool, *, terminal: bool, console: bool) -> str:
        """Ask for the number (again, when the last one was ``wrong``): on the ``terminal`` when it is the channel's,
        and on the web console (when it runs: ``console``); returns the first answer."""
        prompt = ("The number did not match; type the number WeChat shows on the phone" if wrong
                  else "WeChat shows a number on the phone; type it here to connect the bot")
        what = ("the number did not match; type the number WeChat shows on the phone again" if wrong
                else "WeChat shows a number on the phone: type it to connect the bot")
        loop = asyncio.get_running_loop()
        self._wanted = wanted = loop.create_future()
        reading = terminal and self._read_terminal(wanted)
        if reading:
            print(f"{prompt}: ", end="", flush=True)  # noqa: T201 - the plugin's stdin prompt
            logger.info("weixin: %s, in the terminal or on the web console's WeChat login page", what)
        elif console:
            logger.warning("weixin: %s, on the web console's WeChat login page (/weixin)", what)
        else:
            logger.warning("weixin: %s, but the web console is off (web_console_port 0) and no terminal reads it: "
                           "set web_console_port, or start the bot in a terminal with weixin alone", what)
        try:
            return await wanted
        finally:
            self._wanted = None
            if reading:
                with contextlib.suppress(Exception):
                    loop.remove_reader(sys.stdin.fileno())

    @staticmethod
    def _read_terminal(wanted: asyncio.Future[str]) -> bool:
        """Read one line typed in the terminal into ``wanted``; False when stdin cannot be watched."""
        typed = bytearray()

        def readable() -> None:
            try:
                chunk = os.read(fd, 1024)
            except OSError:
                chunk = b""
            typed.extend(chunk)
            if (b"\n" in typed or not chunk) and not wanted.done():
                asyncio.get_running_loop().remove_reader(fd)
                wanted.set_result(typed.split(b"\n")[0].decode(errors="replace").strip())

        try:
            fd = sys.stdin.fileno()
            asyncio.get_running_loop().add_reader(fd, readable)
        except (AttributeError, OSError, ValueError, NotImplementedError, RuntimeError):
            return False
        return True
