"""console/knowledge_page.py: list, upload (with the CSRF token), show a document's chunks, remove; bad uploads are
refused with a note and change nothing."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from config.settings import Config, ConfigHolder
from console.site import web_console
from knowledge.base import KnowledgeBase
from store.store import Store
from tests.console.conftest import free_port
from tests.fakes.documents import encrypt_pdf, make_pdf
from tests.knowledge.test_knowledge import MANUAL


@dataclass
class Parts:
    """What the page uses: the settings, the store and the knowledge base."""

    config: ConfigHolder
    store: Store
    knowledge: KnowledgeBase


def _csrf(page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


async def test_upload_show_and_remove(tmp_path: Path, store: Store) -> None:
    import aiohttp

    holder = ConfigHolder(Config(data_dir=str(tmp_path), web_console_port=free_port()))
    parts = Parts(holder, store, KnowledgeBase(store, holder))
    console = web_console(parts)
    assert await console.start() is True
    base = console.url().split("?")[0]
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get(console.url(), allow_redirects=False) as response:  # the token logs in
                assert response.status == 303
            async with http.get(base + "knowledge") as response:
                page = await response.text()
                assert response.status == 200 and "No documents yet." in page

            async def post_file(name: str, data: bytes, scope: str = "handbook", csrf: str | None = None):
                form = aiohttp.FormData()
                form.add_field("csrf", csrf if csrf is not None else _csrf(page))
                form.add_field("scope", scope)
                form.add_field("file", data, filename=name, content_type="application/octet-stream")
                async with http.post(base + "knowledge/upload", data=form) as response:
                    return response.status, await response.text()

            status, text = await post_file("zephyr.pdf", make_pdf(MANUAL))
            assert status == 200 and "zephyr.pdf was indexed in handbook: 4 pages, 4 chunks." in text
            status, text = await post_file("locked.pdf", encrypt_pdf(make_pdf(MANUAL)))
            assert status == 400 and "locked.pdf was not added: it is encrypted" in text
            status, text = await post_file("x.pdf", make_pdf(MANUAL), scope="../etc")
            assert status == 400 and "cannot name a scope" in text
            status, text = await post_file("x.md", b"# A\nb", csrf="wrong")
            assert status == 403 and "Nothing was changed" in text
            assert [d.name for d in await parts.knowledge.documents()] == ["zephyr.pdf"]

            async with http.get(base + "knowledge") as response:
                text = await response.text()
            doc_id = re.search(r'/knowledge/document\?id=(\d+)">zephyr.pdf', text).group(1)
            async with http.get(base + f"knowledge/document?id={doc_id}") as response:
                shown = await response.text()
            assert "[zephyr.pdf, p. 3]" in shown and "covered for 24 months" in shown

            async with http.post(base + "knowledge/remove", data={"csrf": _csrf(text), "id": doc_id}) as response:
                assert response.status == 200 and "No documents yet." in await response.text()
    finally:
        await console.stop()
    assert await parts.knowledge.documents() == []
