"""The web console in a real headless Chromium, against ``app.py`` with the Telegram channel on the fake Bot API
and the fake OpenAI server.

The tests of the first bot run in order, as an operator would: log in with the start token, chat, change a
setting in the config form, read the summary that follows, edit the notes, take screenshots of every
page, read the log, and forget the conversation.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from config.help import KEY_HELP
from config.settings import KNOWN_KEYS
from summaries.text import SUMMARY_SYSTEM_PROMPT
from tests.console.conftest import DESKTOP, PHONE, free_port
from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI

BOT = "console_test_bot"
SECRET_KEY = "sk-console-secret-9f8e7d6c5b4a"
ADMIN_PASSWORD = "admin-pass-7c6b5a4d"
CONSOLE_PASSWORD = "console-pass-1a2b3c4d"
SUMMARY = "- Alice keeps bees in Lyon and plans the honey harvest for June."
CHAT = 1001
SESSION = f"telegram:{CHAT}"
ADMIN_CHAT = 1003  # an admin by /auth, who asks for new console links with /console
URL_LINE = re.compile(r"web console: (http://\S+)")


def is_summary(body: dict) -> bool:
    """True for the summariser's requests (its system prompt), not the chat's."""
    messages = body.get("messages") or []
    return bool(messages) and str(messages[0].get("content", "")).startswith(SUMMARY_SYSTEM_PROMPT[:40])


def chat_requests(llm: FakeOpenAIServer) -> list[dict]:
    return [r for r in llm.requests if not is_summary(r)]


def user_texts(body: dict) -> list[str]:
    return [m["content"] if isinstance(m["content"], str) else "" for m in body["messages"] if m["role"] == "user"]


def wait_until(check, timeout: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def console_url(proc: BotProcess) -> str:
    proc.wait_for_log("web console: http")
    match = URL_LINE.search(proc.log())
    assert match is not None
    return match.group(1)


def start_bot(folder: Path, api: FakeTelegramAPI, llm: FakeOpenAIServer, port: int, **extra) -> BotProcess:
    proc = BotProcess(folder, channel_type="telegram", telegram_bot_token=api.token,
                      telegram_base_url=api.base_url, telegram_rate_limit=False, open_ai_api_base=llm.base_url,
                      open_ai_api_key=SECRET_KEY, admin_password=ADMIN_PASSWORD, group_chat_keyword=["weather"],
                      timezone="UTC", data_dir="data", web_console_port=port, **extra)
    return proc


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeTelegramAPI, FakeOpenAIServer]]:
    with FakeTelegramAPI(username=BOT) as api, FakeOpenAIServer() as llm:
        llm.responder = lambda body: SUMMARY if is_summary(body) else None
        yield api, llm


@pytest.fixture(scope="module")
def bot(servers, tmp_path_factory) -> Iterator[BotProcess]:
    api, llm = servers
    proc = start_bot(tmp_path_factory.mktemp("console-bot"), api, llm, free_port()).start()
    yield proc
    assert proc.stop() == 0
    assert "Traceback" not in proc.log()


@pytest.fixture(scope="module")
def base(bot) -> str:
    return console_url(bot).split("/?", 1)[0]


@pytest.fixture(scope="module")
def admin(browser, bot):
    """A browser context logged in with the start token."""
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    page.goto(console_url(bot))
    yield page
    context.close()


def snap(page, shots: Path, name: str) -> None:
    """Screenshots of the page as it is: 1280x800, then at a phone's width (the whole page)."""
    page.set_viewport_size(DESKTOP)
    page.screenshot(path=str(shots / f"{name}-1280x800.png"))
    page.set_viewport_size(PHONE)
    page.screenshot(path=str(shots / f"{name}-phone.png"), full_page=True)
    page.set_viewport_size(DESKTOP)


def new_link(api: FakeTelegramAPI) -> str:
    """A new one-time console link, asked for with /console by an admin on Telegram (an /auth first)."""
    if not api.chat_texts(ADMIN_CHAT):
        api.push_text(ADMIN_CHAT, f"/auth {ADMIN_PASSWORD}", user_id=ADMIN_CHAT, first_name="Dora")
        wait_until(lambda: api.chat_texts(ADMIN_CHAT), what="the /auth answer")
    before = len(api.chat_texts(ADMIN_CHAT))
    api.push_text(ADMIN_CHAT, "/console", user_id=ADMIN_CHAT, first_name="Dora")
    answer = wait_until(lambda: api.chat_texts(ADMIN_CHAT)[before:], what="the /console answer")[0]
    match = URL_LINE.search(answer.replace("Web console:", "web console:"))
    assert match is not None, answer
    return match.group(1)


def read_config(bot: BotProcess) -> dict:
    return json.loads(bot.config_path.read_text(encoding="utf-8"))


# --- access -------------------------------------------------------------------------------------------
def test_the_start_token_opens_the_console_with_a_strict_http_only_cookie(browser, bot, base, admin, shots):
    url = console_url(bot)
    assert url.startswith("http://127.0.0.1:") and "?token=" in url
    assert url in (bot.folder / "data" / "bot.log").read_text(encoding="utf-8")  # the token is in bot.log too
    page = admin
    assert page.url == base + "/"  # the token is dropped from the address bar
    assert page.locator("h1").inner_text() == "Status"
    assert page.locator("table tr", has_text="telegram").locator("td").nth(1).inner_text() == "running"
    cookie = next(c for c in page.context.cookies() if c["name"] == "console_session")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    snap(page, shots, "status")
    icon = page.request.get(base + "/favicon.ico")  # what Chromium asks for on its own, with or without a cookie
    assert icon.status == 200 and icon.headers["content-type"] == "image/x-icon"
    assert "set-cookie" not in icon.headers

    stranger = browser.new_context(viewport=DESKTOP)
    other = stranger.new_page()
    response = other.goto(base + "/conversations")
    assert other.url.startswith(base + "/login")
    assert response is not None and "Token" in other.content()
    snap(other, shots, "login-token")
    response = other.goto(base + "/?token=not-the-token")
    assert response is not None and response.status == 403
    assert other.locator(".error").inner_text() == "Wrong token."
    response = other.goto(url)  # the start link again, in another browser: it logged in once, and that was all
    assert response is not None and response.status == 403
    assert other.locator(".error").inner_text().startswith("This link no longer logs in: each link logs in one "
                                                           "browser once")
    snap(other, shots, "login-used-link")
    assert other.goto(base + "/conversations") is not None and other.url.startswith(base + "/login")
    stranger.close()
    page.goto(url)  # the admin's own browser opening it again stays logged in
    assert page.url == base + "/" and page.locator("h1").inner_text() == "Status"


def test_console_sends_an_admin_a_new_one_time_link(servers, bot, base):
    api, _ = servers
    api.push_text(ADMIN_CHAT + 1, "/console", user_id=ADMIN_CHAT + 1, first_name="Mallory")
    assert wait_until(lambda: api.chat_texts(ADMIN_CHAT + 1), what="the refusal") == [
        "Sorry, /console is for admins only."]
    link = new_link(api)
    assert link.startswith(base + "/?token=")
    assert f"web console: new one-time link (asked by telegram:{ADMIN_CHAT}): {link}" in bot.log()


def test_the_token_link_logs_in_every_time_despite_the_favicon_request(browser, servers, base):
    """Chromium asks for /favicon.ico on its own while the token login's redirect lands: that request, with the
    cookie of before the login or none, used to get a fresh session cookie that overwrote the logged-in one
    (8-25% of logins failed). Each try logs in with a new link from /console."""
    api, _ = servers
    fails = []
    for attempt in range(6):
        link = new_link(api)
        context = browser.new_context(viewport=DESKTOP)
        page = context.new_page()
        page.goto(base + "/login")  # a cookie of before the login, as a visitor who opened the console first
        page.goto(link)
        page.wait_for_load_state("networkidle")  # the favicon request has been answered
        page.goto(base + "/conversations")
        if page.locator("h1").inner_text() != "Conversations":
            fails.append(attempt)
        context.close()
    assert fails == []


def test_a_link_from_another_site_does_not_log_the_admin_out(admin, base, shots):
    """A page of another site linking to the console: the click comes without the session cookie (SameSite=Strict),
    so it shows the login form; it must not replace the admin's cookie."""
    page = admin
    before = next(c["value"] for c in page.context.cookies() if c["name"] == "console_session")
    page.route("http://elsewhere.example/", lambda route: route.fulfill(
        status=200, content_type="text/html", body=f'<a id="go" href="{base}/conversations">the console</a>'))
    page.goto("http://elsewhere.example/")
    page.click("#go")
    assert page.url.startswith(base + "/login")  # the cookie was not sent: not logged in for this one request
    page.unroute("http://elsewhere.example/")
    after = next(c["value"] for c in page.context.cookies() if c["name"] == "console_session")
    assert after == before
    page.goto(base + "/conversations")  # typed in or a bookmark: logged in as before
    assert page.locator("h1").inner_text() == "Conversations"


def test_a_form_posted_without_its_csrf_token_is_refused(admin, bot, base):
    before = bot.config_path.read_bytes()
    page = admin
    page.goto(base + "/config")
    page.evaluate("document.querySelector('form.config input[name=csrf]').remove()")
    page.fill("#k-agent_max_steps", "7")
    with page.expect_response(lambda r: r.url == base + "/config" and r.request.method == "POST") as posted:
        page.click("form.config button[type=submit]")
    assert posted.value.status == 403
    assert "This form was refused" in page.locator("p.message").inner_text()
    assert bot.config_path.read_bytes() == before

    # with the token in place, the same form goes through
    page.goto(base + "/config")
    page.fill("#k-agent_max_steps", "7")
    page.click("form.config button[type=submit]")
    assert page.locator(".notice").inner_text() == "Saved: agent_max_steps."
    assert read_config(bot)["agent_max_steps"] == 7


# --- config and the next turn -------------------------------------------------------------------------
def test_agent_max_context_turns_from_the_form_is_used_by_the_next_turn(servers, bot, admin, base, shots):
    api, llm = servers
    texts = ["I keep bees in Lyon", "The hives are on the roof", "Harvest is planned for June",
             "My neighbour Bob helps me"]
    for n, text in enumerate(texts, start=1):
        api.push_text(CHAT, text, user_id=CHAT, first_name="Alice")
        wait_until(lambda n=n: len(api.chat_texts(CHAT)) >= n, what=f"reply {n}")
    assert user_texts(chat_requests(llm)[-1]) == texts  # all four turns with the default budget of 20
    before = read_config(bot)

    page = admin
    page.goto(base + "/config")
    snap(page, shots, "config")
    assert page.locator("#k-channel_type").input_value() == "telegram"  # a string bare, not "\"telegram\""
    assert page.locator("#k-vision").input_value() == "auto"
    assert page.locator("#help-agent_max_context_turns").inner_text() == KEY_HELP["agent_max_context_turns"]
    assert page.locator("form.config small.help").count() == len(KNOWN_KEYS)  # help for every key
    page.fill("#k-agent_max_context_turns", "2")
    page.click("form.config button[type=submit]")
    assert page.locator(".notice").inner_text() == "Saved: agent_max_context_turns."
    assert read_config(bot) == {**before, "agent_max_context_turns": 2}  # every other key kept, in place
    assert list(read_config(bot)) == [*before, "agent_max_context_turns"]  # the others keep their order
    assert page.locator("#k-agent_max_context_turns").input_value() == "2"

    api.push_text(CHAT, "What do you know about my bees?", user_id=CHAT, first_name="Alice")
    wait_until(lambda: len(api.chat_texts(CHAT)) >= 5, what="reply 5")
    last = user_texts(wait_until(lambda: [r for r in chat_requests(llm)
                                          if "What do you know about my bees?" in user_texts(r)],
                                 what="the fifth chat request")[-1])
    # five turns over a budget of two: the oldest half (two turns) is dropped before the call
    assert len(last) == 3 and last[1:] == [texts[3], "What do you know about my bees?"]
    assert last[0].endswith(texts[2])
    assert not any(texts[0] in t or texts[1] in t for t in last)


def test_an_invalid_value_is_refused_naming_the_key(admin, bot, base):
    before = bot.config_path.read_bytes()
    page = admin
    page.goto(base + "/config")
    page.fill("#k-agent_max_context_turns", "0")
    with page.expect_response(lambda r: r.url == base + "/config" and r.request.method == "POST") as posted:
        page.click("form.config button[type=submit]")
    assert posted.value.status == 400
    error = page.locator(".error").inner_text()
    assert error.startswith("Nothing saved: invalid value for 'agent_max_context_turns'")
    assert page.locator("#k-agent_max_context_turns").input_value() == "0"  # what was typed is kept
    page.fill("#k-agent_max_context_turns", "twenty")
    page.click("form.config button[type=submit]")
    assert "invalid value for 'agent_max_context_turns'" in page.locator(".error").inner_text()
    assert bot.config_path.read_bytes() == before


def test_an_edit_is_refused_when_config_json_changed_since_the_page_was_loaded(admin, bot, base):
    page = admin
    page.goto(base + "/config")
    bot.config_path.write_text(json.dumps({**read_config(bot), "agent_max_steps": 9}, indent=2), encoding="utf-8")
    changed = bot.config_path.read_bytes()
    page.fill("#k-group_context_messages", "5")
    with page.expect_response(lambda r: r.url == base + "/config" and r.request.method == "POST") as posted:
        page.click("form.config button[type=submit]")
    assert posted.value.status == 409
    assert "config.json changed since this page was loaded" in page.locator(".error").inner_text()
    assert page.locator("#k-group_context_messages").input_value() == "5"
    assert bot.config_path.read_bytes() == changed


def test_a_secret_is_never_shown_in_the_config_form(admin, base):
    page = admin
    page.goto(base + "/config")
    html = page.content()
    for secret in (SECRET_KEY, ADMIN_PASSWORD):
        assert secret not in html
    assert page.locator("#k-open_ai_api_key").input_value() == ""
    assert page.locator("#k-open_ai_api_key").get_attribute("type") == "password"


# --- conversations ------------------------------------------------------------------------------------
def test_browse_to_the_conversation_and_read_its_summary(admin, base, shots):
    page = admin
    page.goto(base + "/conversations")
    row = page.locator("table.list tbody tr", has_text=SESSION)
    assert row.count() == 1
    cells = row.locator("td").all_inner_texts()
    assert cells[1] == "telegram" and cells[3] == "5"  # five turns stored
    snap(page, shots, "conversations")
    page.fill("#q", "no such chat")
    page.click("form.search button")
    assert "No conversation matches" in page.locator("table.list").inner_text()
    page.fill("#q", "1001")
    page.click("form.search button")
    page.locator("table.list a", has_text="Alice").click()
    assert page.locator("h1").inner_text() == "Alice"

    def summary_shown() -> bool:
        page.reload()
        return page.locator("pre.summary").count() == 1

    wait_until(summary_shown, what="the summary on the page")
    assert SUMMARY in page.locator("pre.summary").inner_text()
    assert re.fullmatch(r"Fact check: the model's summary kept \d+ of \d+ fact\(s\) of what users said \(\d+%\).*",
                        page.locator("p.check").inner_text())
    assert "Context starts here" in page.locator("#boundary").inner_text()
    out = page.locator("article.turn.out")
    assert out.count() == 2 and "I keep bees in Lyon" in out.first.inner_text()
    snap(page, shots, "conversation")


def test_export_downloads_everything_stored(admin, base):
    page = admin
    page.goto(base + "/conversation?id=" + SESSION)
    with page.expect_download() as download:
        page.click("text=Export")
    data = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
    assert data["session"]["session_id"] == SESSION
    users = [m["message"]["content"] for m in data["messages"] if m["message"]["role"] == "user"]
    assert users[0] == "I keep bees in Lyon" and len(users) == 5


def test_clear_context_moves_the_boundary_past_every_turn(admin, base):
    page = admin
    page.goto(base + "/conversation?id=" + SESSION)
    assert page.locator("article.turn:not(.out)").count() == 3
    page.click("text=Clear context")
    assert page.locator(".notice").inner_text().startswith("Context cleared; ")
    assert page.locator("article.turn.out").count() == 5 and page.locator("article.turn:not(.out)").count() == 0
    assert "the context is empty" in page.locator("#boundary").inner_text()
    assert "no summary in this conversation's context now" in page.locator("#summary").inner_text()


def test_notes_are_edited_within_their_cap(admin, bot, base, shots):
    page = admin
    page.goto(base + "/memory")
    snap(page, shots, "memory")
    row = page.locator("table.list tr", has_text=SESSION)
    assert row.locator("td").first.inner_text().splitlines() == ["Alice", SESSION]  # the person first, the id below
    row.locator("text=Edit notes").click()
    assert page.locator("h1").inner_text() == f"MEMORY.md of Alice ({SESSION})"
    too_long = "- " + "x" * 8100
    page.fill("#text", too_long)
    page.click("form.stack button[type=submit]")
    assert page.locator(".error").inner_text().startswith("Not saved: the notes are 8,102 characters long")
    assert page.locator("#text").input_value() == too_long  # nothing lost
    notes = bot.folder / "data" / "memory" / "telegram_1001" / "MEMORY.md"
    assert not notes.exists()
    page.fill("#text", "- The hive on the roof is called Queen Anne")
    page.click("form.stack button[type=submit]")
    assert page.locator(".notice").inner_text().startswith("Saved (")
    assert notes.read_text(encoding="utf-8") == "- The hive on the roof is called Queen Anne\n"
    snap(page, shots, "memory-edit")
    page.goto(base + "/conversation?id=" + SESSION)
    assert "Queen Anne" in page.locator("#memory details[open]").inner_text()


def test_the_reminders_page_lists_a_reminder_set_in_a_chat(servers, admin, base, shots):
    api, _ = servers
    other = CHAT + 1  # a chat of its own: the other tests count this module's replies in CHAT
    page = admin
    page.goto(base + "/reminders")
    assert page.locator("h1").inner_text() == "Reminders"
    assert page.locator("table.list tbody").inner_text().strip() == "No pending reminders."
    api.push_text(other, "/remind tomorrow 9:00 water the plants", user_id=other, first_name="Carol")
    wait_until(lambda: len(api.chat_texts(other)) >= 1, what="the /remind answer")
    page.goto(base + "/reminders")
    row = page.locator("table.list tbody tr").first.inner_text()
    assert "water the plants" in row and f"telegram:{other}" in row and "once" in row
    snap(page, shots, "reminders")


def test_screenshots_of_the_other_pages(admin, base, shots):
    page = admin
    for path, name, heading in (("/weixin", "weixin", "WeChat login"), ("/tools", "tools", "Tools")):
        page.goto(base + path)
        assert page.locator("h1").inner_text() == heading
        snap(page, shots, name)
    page.goto(base + "/conversation/forget?id=" + SESSION)
    snap(page, shots, "forget-confirm")


def test_the_usage_page_shows_todays_tokens_by_model_and_purpose_and_the_cache_share(admin, bot, base, shots):
    page = admin
    page.goto(base + "/usage")
    assert page.locator("h1").inner_text() == "Usage"
    today = datetime.now(UTC).date().isoformat()  # the bot's zone is UTC
    with sqlite3.connect(bot.folder / "data" / "chatbot.db") as db:
        tokens, calls, purposes = db.execute(
            "SELECT SUM(prompt_tokens + completion_tokens), COUNT(*), GROUP_CONCAT(DISTINCT purpose) FROM usage "
            "WHERE created_at >= ?", (today,)).fetchone()
    assert calls > 0 and "reply" in purposes
    cells = [c.inner_text() for c in page.locator("#days-table tbody tr").first.locator("td").all()]
    assert cells == [today, f"{tokens:,}", f"{calls:,}", cells[3], "0.0%"]  # the fake server caches nothing
    day = page.locator(f"#day-{today}")
    for purpose in purposes.split(","):
        assert purpose in day.locator("table.by-model").inner_text()
    assert SESSION in day.locator(".top-sessions").inner_text()
    assert page.locator("#caps").inner_text().count("no cap") == 3
    snap(page, shots, "usage")


def test_everything_but_the_live_log_works_without_javascript(browser, servers, bot, base):
    context = browser.new_context(viewport=DESKTOP, java_script_enabled=False)
    page = context.new_page()
    page.goto(new_link(servers[0]))
    assert page.locator("h1").inner_text() == "Status"
    page.goto(base + "/config")
    page.fill("#k-group_context_messages", "10")
    page.click("form.config button[type=submit]")
    assert page.locator(".notice").inner_text() == "Saved: group_context_messages."
    assert read_config(bot)["group_context_messages"] == 10
    page.goto(base + "/conversation?id=" + SESSION)
    assert page.locator("#transcript article.turn").count() == 5
    page.goto(base + "/logs")
    assert page.locator("#live").is_hidden()  # the live badge shows only when the script runs
    assert page.locator("#log li").count() > 0
    context.close()


# --- logs ---------------------------------------------------------------------------------------------
def test_the_log_page_never_shows_a_secret_and_follows_the_log_live(admin, bot, base, shots):
    log = bot.folder / "data" / "bot.log"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S,000")
    with log.open("a", encoding="utf-8") as fh:  # as an older version, or a line from before a change, wrote it
        fh.write(f"{stamp} WARNING test: key {SECRET_KEY} and password {ADMIN_PASSWORD} leaked\n")
    page = admin
    page.goto(base + "/logs")
    text = page.locator("#log").inner_text()
    assert "key [secret] and password [secret] leaked" in text
    assert SECRET_KEY not in page.content() and ADMIN_PASSWORD not in page.content()
    token = console_url(bot).split("token=", 1)[1]
    assert token not in page.content()  # the start token is masked as well
    tail = page.request.get(base + "/logs/tail?after=0&level=DEBUG").text()
    assert SECRET_KEY not in tail and "leaked" in tail
    snap(page, shots, "logs")

    page.select_option("#level", "ERROR")
    page.click("form.search button")
    assert "leaked" not in page.locator("#log").inner_text()  # a warning, below the filter
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S,000')} ERROR test: live line with {SECRET_KEY}\n")
    page.locator("#log li", has_text="live line with [secret]").wait_for(timeout=10_000)  # no reload
    assert SECRET_KEY not in page.content()


# --- forget -------------------------------------------------------------------------------------------
def test_forget_asks_then_deletes_the_rows_and_files(admin, bot, base):
    db = bot.folder / "data" / "chatbot.db"
    folder = bot.folder / "data" / "memory" / "telegram_1001"

    def rows() -> tuple[int, int]:
        with sqlite3.connect(db) as conn:
            sessions = conn.execute("SELECT count(*) FROM sessions WHERE session_id = ?", (SESSION,)).fetchone()[0]
            messages = conn.execute("SELECT count(*) FROM messages WHERE session_id = ?", (SESSION,)).fetchone()[0]
        return sessions, messages

    assert rows()[0] == 1 and rows()[1] >= 10 and folder.is_dir()
    page = admin
    page.goto(base + "/conversation?id=" + SESSION)
    page.click("text=Forget…")
    assert "cannot be undone" in page.locator("p.warn").inner_text()
    assert rows()[0] == 1  # asking deleted nothing
    page.click("text=Forget this conversation")
    assert page.locator("h1").inner_text() == "Forgotten"
    assert page.locator("p.message").inner_text().startswith(f"{SESSION}: Deleted for good: ")
    assert rows() == (0, 0)
    assert not folder.exists()
    response = page.goto(base + "/conversation?id=" + SESSION)
    assert response is not None and response.status == 404


# --- the password -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def password_bot(tmp_path_factory) -> Iterator[tuple[BotProcess, str]]:
    with FakeTelegramAPI(username=BOT) as api, FakeOpenAIServer() as llm:
        proc = start_bot(tmp_path_factory.mktemp("console-password-bot"), api, llm, free_port())
        proc.extra_env["WEB_CONSOLE_PASSWORD"] = CONSOLE_PASSWORD
        proc.start()
        try:
            yield proc, console_url(proc)
        finally:
            assert proc.stop() == 0


def test_the_password_logs_in_and_five_wrong_ones_lock_out(browser, password_bot, shots):
    proc, url = password_bot
    assert "token" not in url
    assert CONSOLE_PASSWORD not in (proc.folder / "data" / "bot.log").read_text(encoding="utf-8")
    first = browser.new_context(viewport=DESKTOP)
    page = first.new_page()
    page.goto(url)
    assert page.url.startswith(url + "login")
    assert page.locator("label[for=secret]").inner_text() == "Password (web_console_password)"
    snap(page, shots, "login-password")
    page.fill("#secret", CONSOLE_PASSWORD)
    page.click("form.login button")
    assert page.locator("h1").inner_text() == "Status"

    second = browser.new_context(viewport=DESKTOP)
    other = second.new_page()
    other.goto(url + "login")
    for attempt in range(1, 6):
        other.fill("#secret", f"wrong-{attempt}")
        other.click("form.login button")
        message = other.locator(".error").inner_text()
        assert message == ("Wrong password." if attempt < 5 else
                           "Wrong password. Too many failed logins: your address is locked out for 10 minutes.")
    other.fill("#secret", CONSOLE_PASSWORD)  # even the right password now waits
    other.click("form.login button")
    assert other.locator(".error").inner_text() == "Too many failed logins from your address. Try again in 10 minutes."
    assert other.url.startswith(url + "login")
    page.goto(url + "conversations")  # a session from before the lockout still works
    assert page.locator("h1").inner_text() == "Conversations"
    first.close()
    second.close()
