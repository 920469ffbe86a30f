"""The web chat (issue 45) in a real headless Chromium, against ``app.py`` with ``channel_type`` ``"web"`` and the
fake OpenAI server: the operator's page behind the console's login, the public page for anyone, streaming,
history across reloads, HTML shown as text, visitors kept apart, and the rate limit."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.conftest import DESKTOP, PHONE, free_port
from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer

URL_LINE = re.compile(r"web console: (http://\S+)")
STREAMED = ("Bees dance to tell the hive where the flowers are, and the angle of the dance points the way "
            "from the sun.")
RATE = 3


def slow_stream(body: dict) -> dict | None:
    """Answers "stream please" slowly, a few characters at a time; everything else is echoed."""
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    text = users[-1]["content"] if users and isinstance(users[-1]["content"], str) else ""
    if "stream please" in text:
        return {"content": STREAMED, "_stream": {"first_delay": 0.0, "delay": 0.12, "piece": 6, "break_after": None,
                                                 "finish": True, "error": None}}
    return None


def wait_until(check, timeout: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


# Every context bypasses the console's Content Security Policy: Playwright's wait_for_function evaluates its
# predicates as strings, which the policy forbids. So the "shown as text" test runs without that safety net:
# nothing but the page's own handling keeps a <script> or an onerror from running.
def snap(page, shots: Path, name: str) -> None:
    page.set_viewport_size(DESKTOP)
    page.screenshot(path=str(shots / f"web-chat-{name}-1280x800.png"))
    page.set_viewport_size(PHONE)
    page.screenshot(path=str(shots / f"web-chat-{name}-phone.png"), full_page=True)
    page.set_viewport_size(DESKTOP)


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        server.responder = slow_stream
        yield server


@pytest.fixture(scope="module")
def bot(llm, tmp_path_factory) -> Iterator[BotProcess]:
    proc = BotProcess(tmp_path_factory.mktemp("web-chat"), channel_type="web", open_ai_api_base=llm.base_url,
                      open_ai_api_key="sk-web-chat-test", timezone="UTC", data_dir="data",
                      web_console_port=free_port(), web_chat_public=True, web_chat_rate_per_minute=RATE).start()
    yield proc
    assert proc.stop() == 0
    assert "Traceback" not in proc.log()


@pytest.fixture(scope="module")
def token_url(bot) -> str:
    bot.wait_for_log("web console: http")
    match = URL_LINE.search(bot.log())
    assert match is not None
    return match.group(1)


@pytest.fixture(scope="module")
def base(token_url) -> str:
    return token_url.split("/?", 1)[0]


@pytest.fixture(scope="module")
def operator(browser, token_url) -> dict:
    """The operator's login, made once with the one-time link (it opens the console once) and carried by every
    context that needs it (its cookies)."""
    context = browser.new_context(viewport=DESKTOP, bypass_csp=True)
    page = context.new_page()
    page.goto(token_url)
    assert "/login" not in page.url
    state = context.storage_state()
    context.close()
    return state


def stored(bot: BotProcess, session_id: str) -> list[tuple[str, str]]:
    with sqlite3.connect(bot.folder / "data" / "chatbot.db") as db:
        rows = db.execute("SELECT content FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)).fetchall()
    return [(json.loads(c)["role"], json.loads(c).get("content") or "") for (c,) in rows]


def answers(page) -> list[str]:
    return page.locator("li.msg.assistant .bubble").all_inner_texts()


def send(page, text: str) -> None:
    page.fill("#chat-text", text)
    page.click("#chat-send")


# --- the operator's page -----------------------------------------------------------------------------------
def test_the_operators_page_needs_the_console_login(browser, base, operator, shots):
    stranger = browser.new_context(viewport=DESKTOP, bypass_csp=True)
    page = stranger.new_page()
    page.goto(base + "/chat")
    assert page.url.startswith(base + "/login")
    assert page.locator("#chat").count() == 0
    response = page.request.get(base + "/chat/history")
    assert response.url.startswith(base + "/login")  # the JSON is behind the login too
    post = page.request.post(base + "/chat/send", form={"text": "let me in"}, max_redirects=0)
    assert post.status in (303, 403)
    stranger.close()

    context = browser.new_context(viewport=DESKTOP, bypass_csp=True, storage_state=operator)
    page = context.new_page()
    page.goto(base + "/chat")
    assert page.locator("#chat").count() == 1
    assert page.locator("nav a.active").inner_text() == "Chat"
    context.close()


def test_a_streamed_answer_appears_word_by_word_and_a_reload_keeps_the_history(browser, bot, base, operator,
                                                                                  shots):
    context = browser.new_context(viewport=DESKTOP, bypass_csp=True, storage_state=operator)
    page = context.new_page()
    page.goto(base + "/chat")
    page.wait_for_selector("#chat[data-connected]")
    # every text the answer's bubble shows while it grows
    page.evaluate("""() => {
        window.seen = [];
        new MutationObserver(() => {
            const b = document.querySelector('li.msg.assistant:last-child .bubble');
            if (b && window.seen[window.seen.length - 1] !== b.textContent) { window.seen.push(b.textContent); }
        }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
    }""")
    send(page, "stream please: how do bees find flowers?")
    page.wait_for_selector("li.msg.assistant.streaming", timeout=15000)
    snap(page, shots, "streaming")
    page.wait_for_function("(t) => { const a = document.querySelectorAll('li.msg.assistant .bubble');"
                           " return a.length && a[a.length - 1].textContent.trim() === t; }", arg=STREAMED,
                           timeout=30000)
    seen = [s.strip() for s in page.evaluate("window.seen")]
    growing = [s for s in seen if s and STREAMED.startswith(s) and s != STREAMED]
    assert len(growing) >= 5, seen  # shown piece by piece, not all at once
    assert all(len(a) < len(b) for a, b in zip(growing, growing[1:], strict=False))
    assert page.locator("li.msg.user .bubble").last.inner_text() == "stream please: how do bees find flowers?"
    snap(page, shots, "answered")

    wait_until(lambda: ("assistant", STREAMED) in stored(bot, "web:console"), what="the answer stored")
    page.reload()
    assert page.locator("li.msg.user .bubble").all_inner_texts() == ["stream please: how do bees find flowers?"]
    assert [a.strip() for a in answers(page)] == [STREAMED]
    page.wait_for_selector("#chat[data-connected]")
    assert [a.strip() for a in answers(page)] == [STREAMED]  # the history reloaded by the script, not doubled
    context.close()


def test_html_in_a_message_or_an_answer_is_shown_as_text(browser, base, operator, shots):
    context = browser.new_context(viewport=DESKTOP, bypass_csp=True, storage_state=operator)
    page = context.new_page()
    page.goto(base + "/chat")
    page.wait_for_selector("#chat[data-connected]")
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    evil = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"> **bold**'
    send(page, evil)
    # the fake model echoes it: "echo: <script>…" comes back as the model's answer
    page.wait_for_function("() => [...document.querySelectorAll('li.msg.assistant .bubble')]"
                           ".some(b => b.textContent.includes('echo: <script>'))", timeout=15000)
    assert page.evaluate("window.pwned") is None
    assert dialogs == []
    assert page.locator("li.msg.user .bubble").last.inner_text() == evil
    answer = page.locator("li.msg.assistant .bubble").last
    assert "<script>window.pwned = 1</script>" in answer.inner_text()
    assert answer.locator("script, img").count() == 0
    assert answer.locator("strong").inner_text() == "bold"  # Markdown is still rendered
    page.reload()  # and from the stored history
    assert page.locator("li.msg.assistant .bubble script, li.msg.assistant .bubble img").count() == 0
    assert "<script>" in page.locator("li.msg.assistant .bubble").last.inner_text()
    assert page.evaluate("window.pwned") is None
    snap(page, shots, "html-as-text")
    context.close()


# --- the public page ----------------------------------------------------------------------------------------
def test_two_visitors_never_see_each_others_messages(browser, bot, base, shots):
    alice_ctx = browser.new_context(viewport=DESKTOP, bypass_csp=True)
    bob_ctx = browser.new_context(viewport=DESKTOP, bypass_csp=True)
    alice, bob = alice_ctx.new_page(), bob_ctx.new_page()
    alice.goto(base + "/chat/public")
    bob.goto(base + "/chat/public")
    assert alice.locator("nav").count() == 0  # no console for visitors
    for page in (alice, bob):
        page.wait_for_selector("#chat[data-connected]")
    send(alice, "alice here: my cat is called Pixel")
    alice.wait_for_function("() => [...document.querySelectorAll('li.msg.assistant .bubble')]"
                            ".some(b => b.textContent.includes('Pixel'))", timeout=15000)
    send(bob, "bob here: my dog is called Rex")
    bob.wait_for_function("() => [...document.querySelectorAll('li.msg.assistant .bubble')]"
                          ".some(b => b.textContent.includes('Rex'))", timeout=15000)
    for page in (alice, bob):
        page.reload()
        page.wait_for_selector("#chat[data-connected]")
    assert "Pixel" in alice.content() and "Rex" not in alice.content()
    assert "Rex" in bob.content() and "Pixel" not in bob.content()
    cookie = next(c for c in alice_ctx.cookies() if c["name"] == "web_chat_visitor")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    visitor = cookie["value"].rsplit(".", 1)[0]
    assert any("Pixel" in text for _, text in stored(bot, f"web:{visitor}"))
    # a forged cookie (another id, no valid signature) is no one
    forged = browser.new_context(viewport=DESKTOP, bypass_csp=True)
    forged.add_cookies([{**cookie, "value": visitor + ".0000"}])
    response = forged.new_page().request.get(base + "/chat/public/history")
    assert response.status == 403 and "Pixel" not in response.text()
    forged.close()
    snap(alice, shots, "public-alice")
    alice_ctx.close()
    bob_ctx.close()


def test_the_public_page_refuses_a_visitor_over_the_rate_limit_clearly(browser, base, shots):
    context = browser.new_context(viewport=DESKTOP, bypass_csp=True)
    page = context.new_page()
    page.goto(base + "/chat/public")
    page.wait_for_selector("#chat[data-connected]")
    for n in range(RATE):
        send(page, f"message {n}")
        page.wait_for_function("(n) => document.querySelectorAll('li.msg.user').length === n", arg=n + 1)
    send(page, "one too many")
    status = page.locator("#chat-status")
    status.wait_for(state="visible")
    assert f"at most {RATE} a minute" in status.inner_text()
    assert "not sent" in status.inner_text()
    assert page.locator("li.msg.user").count() == RATE
    assert page.input_value("#chat-text") == "one too many"  # kept, to send later
    snap(page, shots, "rate-limited")
    context.close()


def test_a_visitor_whose_process_dies_gets_the_answer_after_reconnecting(browser, llm, tmp_path, shots):
    port = free_port()
    proc = BotProcess(tmp_path, channel_type="web", open_ai_api_base=llm.base_url, open_ai_api_key="sk-web-chat-test",
                      timezone="UTC", data_dir="data", web_console_port=port, web_chat_public=True).start()
    proc.wait_for_log("web console: http")
    base = f"http://127.0.0.1:{port}"
    context = browser.new_context(viewport=DESKTOP, bypass_csp=True)
    try:
        page = context.new_page()
        page.goto(base + "/chat/public")
        page.wait_for_selector("#chat[data-connected]")
        requests = len(llm.requests)
        llm.latency = 5.0
        send(page, "a slow question")
        llm.wait_for_requests(requests + 1, timeout=15)
        proc.kill()  # kill -9 mid-turn: the message is journalled, the answer not sent
        llm.latency = 0.0
        page.wait_for_selector("#chat:not([data-connected])")
        assert page.locator("#chat-status").inner_text() == "Connection lost; reconnecting…"
        snap(page, shots, "reconnecting")
        proc.start()
        # the same page, not reloaded: it reconnects by itself and gets the answer
        page.wait_for_function("() => [...document.querySelectorAll('li.msg.assistant .bubble')]"
                               ".some(b => b.textContent.includes('echo: a slow question'))", timeout=30000)
        page.wait_for_timeout(1000)  # nothing more may come
        assert [a.strip() for a in answers(page)] == ["echo: a slow question"]
        assert page.locator("li.msg.user .bubble").all_inner_texts() == ["a slow question"]
        assert len([r for r in llm.requests if "a slow question" in json.dumps(r["messages"][-1])]) == 2
    finally:
        llm.latency = 0.0
        context.close()
        assert proc.stop() == 0


def test_web_alone_with_its_console_unable_to_start_is_one_line(llm, tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = BotProcess(tmp_path, channel_type="web", open_ai_api_base=llm.base_url, open_ai_api_key="sk-test",
                          data_dir="data", web_console_port=port)
        proc.start(wait_for_log=None)
        code = proc.proc.wait(60)
        proc.stop()
    assert code != 0
    err = proc.log()
    assert "setup error: no channel can run: web: the web console did not start" in err
    assert "Traceback" not in err
    off = BotProcess(tmp_path / "off", channel_type="web", data_dir="data", web_console_port=0)
    (tmp_path / "off").mkdir()
    off.start(wait_for_log=None)
    assert off.proc.wait(60) != 0
    off.stop()
    assert "the web chat is a page of the web console, which is off (web_console_port is 0)" in off.log()
