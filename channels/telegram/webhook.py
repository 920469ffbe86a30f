"""Telegram's webhook: a small aiohttp server that answers 200 only once the update's message is journalled.

PTB's ``Updater.start_webhook`` puts an update in a queue and answers 200 at once; a crash between the two
loses a message Telegram counts as delivered. Here each POST is read with PTB's ``Update.de_json``, its
message handed to the dispatcher, and the answer waits for the journal write:

- 200: journalled, or nothing to journal (another kind of update, a service message, a duplicate);
- 500: the database refused it (it is away), so Telegram delivers it again later;
- 403: the ``X-Telegram-Bot-Api-Secret-Token`` header is missing or wrong (a forged post);
- 200 as well for an update that cannot be read: logged once and skipped, since any other answer makes
  Telegram deliver it again, for as long as it keeps trying.

Any number of processes may serve one webhook URL behind a load balancer (DESIGN §10): whichever receives
an update journals it, and the journal's dedup answers a redelivery once.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any

from aiohttp import web
from telegram import Update

logger = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
#: How long a stop waits for posts in flight (their journal writes) before closing their connections.
SHUTDOWN_GRACE = 5.0


class WebhookServer:
    """Serves ``POST /<path>`` on ``listen:port`` for one :class:`channels.telegram.channel.TelegramChannel`."""

    def __init__(self, channel: Any, *, listen: str, port: int, path: str, secret: str) -> None:
        self.channel = channel
        self.listen = listen
        self.port = port
        self.path = "/" + path.strip("/")
        self.secret = secret.encode()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen; raises ``OSError`` when the address cannot be bound."""
        app = web.Application()
        app.router.add_post(self.path, self.on_post)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.listen, self.port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner

    async def stop(self) -> None:
        """Stop listening, once the posts in flight are answered (or the grace ran out)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def on_post(self, request: web.Request) -> web.Response:
        """One update from Telegram."""
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, self.secret):
            logger.warning("telegram: a webhook post without the right secret token was refused")
            return web.Response(status=403)
        body = await request.read()
        update = self.read_update(body)
        if update is None:
            return web.Response()
        message = update.message
        try:
            incoming = self.channel.to_incoming(message) if message is not None else None
        except Exception as exc:  # noqa: BLE001 - whatever a message PTB parsed but we cannot read raises
            logger.warning("telegram: update %d could not be read (%s: %.200s); skipped", update.update_id,
                           type(exc).__name__, exc)
            return web.Response()
        if incoming is None:
            return web.Response()
        if not await self.channel.deliver(incoming):
            logger.warning("telegram: update %d could not be journalled; Telegram will deliver it again",
                           update.update_id)
            return web.Response(status=500)
        return web.Response()

    def read_update(self, body: bytes) -> Update | None:
        """The update in ``body``, or None (logged once) when it cannot be read."""
        try:
            data = json.loads(body)
        except ValueError as exc:
            logger.warning("telegram: a webhook post that is not JSON was skipped (%s)", exc)
            return None
        update_id = data.get("update_id") if isinstance(data, dict) else None
        if not isinstance(update_id, int):
            logger.warning("telegram: a webhook post without an update id was skipped")
            return None
        try:
            return Update.de_json(data, self.channel.bot)
        except Exception as exc:  # noqa: BLE001 - whatever PTB raises on data it cannot read
            logger.warning("telegram: update %d could not be read (%s: %.200s); skipped", update_id,
                           type(exc).__name__, exc)
            return None


__all__ = ["WebhookServer", "SECRET_HEADER"]
