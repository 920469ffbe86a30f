"""The knowledge base (DESIGN §14): parsing, chunking, the tables, scopes and the hybrid search, on the real
database (SQLite, and PostgreSQL with TEST_DATABASE_URL) and the bundled embedding model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from config.settings import Config
from knowledge.base import EMPTY_RECHECK, KnowledgeBase, Refused, format_hits
from knowledge.chunk import CHUNK_CHARS, chunk, citation
from knowledge.folder import FOLDER, KnowledgeFolder
from knowledge.parse import Unreadable, parse
from knowledge.scopes import chat_scopes, own_scope
from memory.embeddings import LocalEmbedder
from store.store import Store
from tests.fakes.documents import encrypt_pdf, make_docx, make_pdf
from tests.memory.test_index import HashEmbedder

MANUAL = [
    "Getting started. Unpack the Zephyr kettle and rinse it twice before the first use.",
    "Battery. The cordless base holds a charge for ten hours; charge it fully before first use.",
    "Warranty. The Zephyr kettle is covered for 24 months from the date of purchase. Keep the receipt.",
    "Cleaning. Descale the kettle every month with white vinegar; never put it in the dishwasher.",
]


def _config(tmp_path: Path, **kw) -> Config:
    return Config(data_dir=str(tmp_path), **kw)


# --- parsing --------------------------------------------------------------------------------------------
def test_pdf_keeps_pages_and_bad_pdfs_get_clear_reasons() -> None:
    pdf = make_pdf(MANUAL)
    parsed = parse(pdf, "zephyr.pdf")
    assert parsed.kind == "pdf" and parsed.pages == 4
    assert [b.page for b in parsed.blocks] == [1, 2, 3, 4]
    assert "24 months" in parsed.blocks[2].text
    with pytest.raises(Unreadable, match="encrypted"):
        parse(encrypt_pdf(pdf), "locked.pdf")
    with pytest.raises(Unreadable, match="not a readable PDF"):
        parse(pdf[: len(pdf) // 3], "cut.pdf")
    with pytest.raises(Unreadable, match="no text"):
        parse(make_pdf(["", "", ""]), "scanned.pdf")
    with pytest.raises(Unreadable, match="4 pages; .* at most 3"):
        parse(pdf, "zephyr.pdf", max_pages=3)
    with pytest.raises(Unreadable, match="not a kind of document"):
        parse(b"\x00\x01", "photo.jpg")


def test_docx_markdown_html_and_text_keep_headings() -> None:
    docx = parse(make_docx([("Holidays", "Everyone gets 25 days.\n\nAsk HR first."), ("Pay", "Paid monthly.")]),
                 "handbook.docx")
    assert [(b.heading, b.text) for b in docx.blocks] == [("Holidays", "Everyone gets 25 days.\n\nAsk HR first."),
                                                           ("Pay", "Paid monthly.")]
    md = parse(b"intro\n# Setup\nrun it\n\n```\n# not a heading\n```\nFAQ\n---\nanswers", "guide.md")
    assert [(b.heading, b.text.split("\n")[0]) for b in md.blocks] == [("", "intro"), ("Setup", "run it"),
                                                                        ("FAQ", "answers")]
    html = parse(b"<html><head><title>Help</title><style>p{}</style></head><body><p>hello</p>"
                 b"<h2>Returns <i>policy</i></h2><p>30 days</p><script>evil()</script></body></html>", "help.html")
    assert [(b.heading, b.text) for b in html.blocks] == [("Help", "hello"), ("Returns policy", "30 days")]
    text = parse("纯文本说明：保修两年。".encode(), "notes.txt")
    assert text.blocks[0].text == "纯文本说明：保修两年。"
    with pytest.raises(Unreadable, match="no text"):
        parse(b"   \n", "empty.md")


def test_chunks_stay_on_their_page_with_overlap_and_cite() -> None:
    sentences = " ".join(f"Sentence number {i} talks about topic {i}." for i in range(120))
    parsed = parse(make_pdf([sentences, "Short page."], width=2000), "long.pdf")
    chunks = chunk(parsed)
    assert all(len(c.text) <= CHUNK_CHARS for c in chunks)
    first_page = [c for c in chunks if c.page == 1]
    assert len(first_page) > 2 and chunks[-1].page == 2 and chunks[-1].text == "Short page."
    # each chunk after the first on a page starts with the last sentence of the one before it
    for before, after in zip(first_page, first_page[1:], strict=False):
        assert after.text.split(".")[0] + "." in before.text
    assert citation("a.pdf", 3, "") == "[a.pdf, p. 3]"
    assert citation("b.md", None, "Setup") == "[b.md, § Setup]"


def test_scopes() -> None:
    assert own_scope("telegram", "-100", True) == "telegram-group--100"
    assert own_scope("telegram", "5", False) is None
    assert chat_scopes("telegram", "-100", True, ["handbook", "telegram-group--200"]) == [
        "global", "telegram-group--100", "handbook"]  # another group's own scope is never granted


# --- the base on the real database ----------------------------------------------------------------------
async def test_add_search_replace_remove(store: Store, tmp_path: Path) -> None:
    embedder = LocalEmbedder()
    kb = KnowledgeBase(store, lambda: _config(tmp_path), lambda: embedder)
    group = own_scope("telegram", "-100", True)
    added = await kb.add(group, "zephyr.pdf", make_pdf(MANUAL), "telegram:1")
    assert (added.document.pages, added.document.chunks, added.unchanged) == (4, 4, False)
    scopes = await kb.scopes_for("telegram", "-100", True)
    # meaning: no word of the question is in the passage ("guarantee" / "warranty", "how long" / "24 months")
    hits = await kb.search(scopes, "what guarantee do I get?", words=False)
    assert hits[0].page == 3
    hits = await kb.search(scopes, "warranty months")
    assert format_hits(hits).startswith("[zephyr.pdf, p. 3] Warranty.")
    # another group never sees it
    other = await kb.scopes_for("telegram", "-200", True)
    assert await kb.search(other, "warranty months") == []
    # the same bytes again: nothing indexed again
    again = await kb.add(group, "zephyr.pdf", make_pdf(MANUAL), "telegram:1")
    assert again.unchanged and again.document.id == added.document.id
    # a changed file replaces its chunks
    changed = MANUAL[:2] + ["Warranty. Now 36 months."]
    replaced = await kb.add(group, "zephyr.pdf", make_pdf(changed), "telegram:1")
    assert replaced.replaced and replaced.document.chunks == 3
    hits = await kb.search(scopes, "warranty months")
    assert "36 months" in hits[0].text and not any("24 months" in h.text for h in hits)
    assert await kb.remove(group, "zephyr.pdf") is not None
    assert await kb.search(scopes, "warranty months") == []
    assert await kb.documents(scopes) == []


async def test_refusals_change_nothing(store: Store, tmp_path: Path) -> None:
    kb = KnowledgeBase(store, lambda: _config(tmp_path, knowledge_max_mb=1, knowledge_max_pages=3), lambda: None)
    await kb.add("global", "zephyr.pdf", make_pdf(MANUAL[:3]), "console")
    for data, name, reason in [(b"x" * (1024 * 1024 + 1), "big.txt", "1.0 MB; .* at most 1 MB"),
                               (make_pdf(MANUAL), "zephyr.pdf", "4 pages"),
                               (encrypt_pdf(make_pdf(MANUAL)), "zephyr.pdf", "encrypted"),
                               (b"%PDF-1.4 not really", "zephyr.pdf", "not a readable PDF")]:
        with pytest.raises(Refused, match=reason):
            await kb.add("global", name, data, "console")
    (doc,) = await kb.documents(["global"])
    assert (doc.name, doc.pages, doc.chunks) == ("zephyr.pdf", 3, 3)  # the earlier version stands
    hits = await kb.search(["global"], "warranty")
    assert hits and hits[0].page == 3  # keywords only (no embedder)


async def test_grants_let_a_chat_see_a_named_scope(store: Store, tmp_path: Path) -> None:
    kb = KnowledgeBase(store, lambda: _config(tmp_path), lambda: HashEmbedder())
    await kb.add("handbook", "rules.md", b"# Holidays\nEveryone gets 25 days of holiday.", "console")
    before = await kb.scopes_for("telegram", "-100", True)
    assert await kb.search(before, "holiday days") == []
    assert await kb.tables.grant("telegram:-100", "handbook", "telegram:1")
    hits = await kb.search(await kb.scopes_for("telegram", "-100", True), "holiday days")
    assert format_hits(hits) == "[rules.md, § Holidays] Everyone gets 25 days of holiday."
    assert await kb.search(await kb.scopes_for("telegram", "-200", True), "holiday days") == []
    assert await kb.tables.revoke("telegram:-100", "handbook")
    assert await kb.search(await kb.scopes_for("telegram", "-100", True), "holiday days") == []


async def test_a_turns_documents_are_the_chats_scopes_documents(store: Store, tmp_path: Path) -> None:
    """``chat_documents`` (each turn's one read) gives what ``scopes_for`` and ``documents`` give, grants included,
    another group's own scope never, even when granted."""
    kb = KnowledgeBase(store, lambda: _config(tmp_path), lambda: None)

    async def both(chat_id: str, is_group: bool) -> tuple[list[str], list]:
        scopes = await kb.scopes_for("telegram", chat_id, is_group)
        return scopes, await kb.documents(scopes)

    assert await kb.chat_documents("telegram", "-100", True) == (["global", "telegram-group--100"], [])
    await kb.add("handbook", "rules.md", b"# Holidays\nEveryone gets 25 days.", "console")
    await kb.add("telegram-group--200", "theirs.md", b"# Secret\nOnly group -200 reads this.", "console")
    assert (await kb.chat_documents("telegram", "-100", True))[1] == []  # granted nothing yet
    assert await kb.tables.grant("telegram:-100", "handbook", "telegram:1")
    assert await kb.tables.grant("telegram:-100", "telegram-group--200", "telegram:1")  # never searched
    await kb.add("global", "faq.md", b"# FAQ\nAsk us.", "console")
    await kb.add("telegram-group--100", "ours.md", b"# Ours\nGroup -100 only.", "console")
    scopes, docs = await kb.chat_documents("telegram", "-100", True)
    assert (scopes, docs) == await both("-100", True)
    assert [(d.scope, d.name) for d in docs] == [("global", "faq.md"), ("handbook", "rules.md"),
                                                 ("telegram-group--100", "ours.md")]
    assert await kb.chat_documents("telegram", "7", False) == await both("7", False)
    assert [d.name for d in (await kb.chat_documents("telegram", "7", False))[1]] == ["faq.md"]


async def test_an_empty_knowledge_base_is_looked_at_again_after_a_while(store: Store, tmp_path: Path) -> None:
    """While no document exists, a turn's read is answered from what the database said at most EMPTY_RECHECK s
    ago (a bot without documents pays no query a turn); this process's own add counts at once, another
    process's after that time, and a removal at once (the chat's documents are read while any exists)."""
    now = [1000.0]
    kb = KnowledgeBase(store, lambda: _config(tmp_path), lambda: None)
    other = KnowledgeBase(store, lambda: _config(tmp_path), lambda: None)  # another process on the same database
    kb.clock = other.clock = lambda: now[0]
    assert (await kb.chat_documents("telegram", "7", False))[1] == []
    await other.add("global", "faq.md", b"# FAQ\nAsk us.", "console")
    now[0] += EMPTY_RECHECK - 0.5
    assert (await kb.chat_documents("telegram", "7", False))[1] == []  # not looked at again yet
    now[0] += 0.5
    assert [d.name for d in (await kb.chat_documents("telegram", "7", False))[1]] == ["faq.md"]
    await other.remove("global", "faq.md")
    assert (await kb.chat_documents("telegram", "7", False))[1] == []
    await kb.add("global", "rules.md", b"# Rules\nBe kind.", "console")
    assert [d.name for d in (await kb.chat_documents("telegram", "7", False))[1]] == ["rules.md"]
    assert [d.name for d in (await other.chat_documents("telegram", "7", False))[1]] == ["rules.md"]


async def test_folder_scan_and_watch(store: Store, tmp_path: Path) -> None:
    kb = KnowledgeBase(store, lambda: _config(tmp_path, knowledge_max_mb=1), lambda: None)
    root = tmp_path / "knowledge"
    (root / "global").mkdir(parents=True)
    (root / "global" / "faq.md").write_text("# Returns\nReturns are accepted within 30 days.")
    (root / "global" / "huge.txt").write_bytes(b"a" * (2 * 1024 * 1024))
    (root / "not a scope!").mkdir()
    (root / "not a scope!" / "x.md").write_text("# X\nhidden")
    folder = KnowledgeFolder(kb, root, debounce_ms=50)
    await folder.start()
    try:
        await asyncio.wait_for(folder.ready.wait(), 30)
        docs = await kb.documents()
        assert [(d.scope, d.name, d.added_by) for d in docs] == [("global", "faq.md", FOLDER)]
        (root / "global" / "manual.pdf").write_bytes(make_pdf(MANUAL))
        for _ in range(300):  # the watch picks it up (debounced); no fixed sleep decides the outcome
            if len(await kb.documents()) == 2:
                break
            await asyncio.sleep(0.05)
        assert {d.name for d in await kb.documents()} == {"faq.md", "manual.pdf"}
        (root / "global" / "faq.md").unlink()
        for _ in range(300):
            if len(await kb.documents()) == 1:
                break
            await asyncio.sleep(0.05)
        assert [d.name for d in await kb.documents()] == ["manual.pdf"]
        # a new scope folder with a file put in it at once: the watcher sees the folder, not always the file
        for n in range(5):
            (root / f"team{n}").mkdir()
            (root / f"team{n}" / "notes.md").write_text(f"# Notes\nTeam {n} meets on Mondays.")
        for _ in range(300):
            if len(await kb.documents()) == 6:
                break
            await asyncio.sleep(0.05)
        assert sorted((d.scope, d.name) for d in await kb.documents()) == [
            ("global", "manual.pdf"), *((f"team{n}", "notes.md") for n in range(5))]
        for n in range(5):
            (root / f"team{n}" / "notes.md").unlink()
    finally:
        await folder.stop()
    # a restart with the file gone meanwhile: the scan removes it; an unchanged file is not indexed again
    (root / "global" / "manual.pdf").unlink()
    await KnowledgeFolder(kb, root).scan()
    assert await kb.documents() == []


def test_auto_passages_fit_the_budget_best_first() -> None:
    from agent.context import PASSAGES_HEADER, fit_passages
    from agent.tokens import TokenCounters

    counter = TokenCounters()("gpt-4o-mini")
    best, long, short = "[a.pdf, p. 1] " + "word " * 20, "[b.md, § X] " + "word " * 400, "[c.md] tiny"
    block, tokens = fit_passages([best, long, short], 120, counter)
    assert block == "\n\n".join([PASSAGES_HEADER, best, short])  # the long one is left out, the order kept
    assert 0 < tokens <= 120
    assert fit_passages([long], 120, counter) == ("", 0)
    assert fit_passages([best], 0, counter) == ("", 0)
