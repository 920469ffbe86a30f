"""The usage page (DESIGN §11, §12): tokens per day in the configured zone, by model and purpose, the chats and
people that spent most, the share of prompt tokens the server read from its cache, and the caps in force."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from aiohttp import web

from console.server import console_of

logger = logging.getLogger(__name__)

#: Days shown unless ``?days=`` asks for others (at most :data:`MAX_DAYS`).
DEFAULT_DAYS = 14
MAX_DAYS = 90


def add_routes(router: web.UrlDispatcher) -> None:
    """Register the usage page."""
    router.add_get("/usage", usage_page)


def _days(value: str | None) -> int:
    try:
        return min(MAX_DAYS, max(1, int(value or DEFAULT_DAYS)))
    except ValueError:
        return DEFAULT_DAYS


async def usage_page(request: web.Request) -> web.StreamResponse:
    """The last days' usage, newest first, and today's against the caps."""
    console = console_of(request)
    services = console.services
    cfg = services.config()
    if services.usage is None:
        return console.render(request, "placeholder.html", title="Usage",
                              message="Usage is not recorded in this setup.")
    days = _days(request.query.get("days"))
    zone = cfg.zone()
    now = datetime.now(UTC)
    reports = await services.usage.days(zone, days, today=now)
    caps = [("One person", cfg.usage_cap_user_daily_tokens), ("One group", cfg.usage_cap_group_daily_tokens),
            ("The whole bot", cfg.usage_cap_daily_tokens)]
    return console.render(request, "usage.html", title="Usage", reports=reports, days=days, zone=str(zone),
                          caps=caps, fallback=cfg.usage_fallback_model)
