"""console/pages.py's reminders page: the pending reminders of every conversation, soonest first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from config.settings import Config, ConfigHolder
from console.site import web_console
from core.records import SessionInfo
from store.reminders import Reminders
from store.store import Store
from tests.console.conftest import free_port


@dataclass
class Parts:
    """What the reminders page uses: the settings and the store."""

    config: ConfigHolder
    store: Store


async def test_the_page_lists_pending_reminders_soonest_first(tmp_path: Path, store: Store) -> None:
    import aiohttp

    reminders = Reminders(store)
    for sid in ("telegram:1", "telegram:2"):
        await store.sessions.ensure(SessionInfo(sid, "telegram", sid[9:], sid[9:]))
    soon = datetime(2030, 1, 2, 8, 0, tzinfo=UTC)
    await reminders.add("telegram:2", "telegram:2", soon + timedelta(days=1), "later <b>one</b>", every="daily 09:00")
    await reminders.add("telegram:1", "telegram:1", soon, "sooner one")
    await reminders.add("telegram:1", "telegram:1", soon, "cancelled one")
    await reminders.cancel("telegram:1", 2, "telegram:1", may_cancel_any=True)  # same time: the later set is 2
    parts = Parts(ConfigHolder(Config(data_dir=str(tmp_path), web_console_port=free_port(),
                                      timezone="Asia/Shanghai")), store)
    console = web_console(parts)
    assert await console.start() is True
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get(console.url(), allow_redirects=False) as response:  # the token logs in
                assert response.status == 303
            async with http.get(console.url().split("?")[0] + "reminders") as response:
                page = await response.text()
                assert response.status == 200
    finally:
        await console.stop()
    assert "in Asia/Shanghai" in page
    assert page.index("2030-01-02 16:00") < page.index("sooner one") < page.index("2030-01-03 16:00")
    assert "every day at 09:00" in page and "later &lt;b&gt;one&lt;/b&gt;" in page
    assert "cancelled one" not in page
