"""Tests for plugins/builtin/admin.py: /config and /auth."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

import time_machine

import config.settings as config_module
from dispatcher.replies import ADMIN_ONLY_REPLY, PRIVATE_ONLY_REPLY
from tests.plugins.harness import PluginBot

SETTINGS = {"model": "gpt-4o-mini", "open_ai_api_key": "sk-test-0123456789a1b2", "agent_max_steps": 5}


def keys(bot: PluginBot) -> list[str]:
    return list(json.loads(bot.file_bytes()))


async def test_a_non_admin_is_refused_and_nothing_changes(tmp_path):
    async with PluginBot(tmp_path, **SETTINGS) as bot:
        before = bot.file_bytes()
        assert await bot.say("/config model gpt-4o") == ADMIN_ONLY_REPLY.format(command="config")
        assert await bot.say("/config") == ADMIN_ONLY_REPLY.format(command="config")
        assert bot.file_bytes() == before
        assert bot.holder().model == "gpt-4o-mini"


async def test_listing_masks_secrets(tmp_path):
    async with PluginBot(tmp_path, **SETTINGS, admin_password="hunter2-pass") as bot:
        listing = (await bot.admin("/config")).splitlines()
        assert listing[0] == "Settings (secrets masked; * takes effect after a restart):"
        assert "open_ai_api_key* = sk-…a1b2" in listing
        assert "admin_password = set" in listing  # a password never in part: "hun…pass" showed 7 of 12
        assert "telegram_bot_token* = not set" in listing
        assert "agent_max_steps = 5" in listing
        assert 'model = "gpt-4o-mini"' in listing
        assert len(listing) == 2 + len(config_module.KNOWN_KEYS)
        text = "\n".join(listing)
        assert "0123456789" not in text and "hunter2" not in text and "hun…" not in text and "…pass" not in text
        assert await bot.admin("/config open_ai_api_key") == (
            "open_ai_api_key = sk-…a1b2 (changes take effect after a restart)")
        assert await bot.admin("/config agent_max_steps") == "agent_max_steps = 5"
        assert await bot.admin("/config agent_max_step") == ("unknown config key 'agent_max_step'; "
                                                            "did you mean agent_max_steps?")


async def test_set_a_value_writes_atomically_keeps_other_keys_and_applies_live(tmp_path):
    async with PluginBot(tmp_path, **SETTINGS) as bot:
        assert await bot.admin("/config agent_max_context_turns 30") == "Set agent_max_context_turns = 30."
        assert bot.holder().agent_max_context_turns == 30
        assert keys(bot) == ["data_dir", "model", "open_ai_api_key", "agent_max_steps", "agent_max_context_turns"]
        assert await bot.admin("/config model gpt-4o") == 'Set model = "gpt-4o".'
        assert keys(bot) == ["data_dir", "model", "open_ai_api_key", "agent_max_steps", "agent_max_context_turns"]
        data = json.loads(bot.file_bytes())
        assert data == {"data_dir": "data", "model": "gpt-4o", "open_ai_api_key": "sk-test-0123456789a1b2",
                        "agent_max_steps": 5, "agent_max_context_turns": 30}
        assert await bot.admin('/config group_chat_keyword ["a", "b"]') == 'Set group_chat_keyword = ["a", "b"].'
        assert await bot.admin("/config group_at_off true") == "Set group_at_off = true."
        assert await bot.admin('/config character_desc You are a pirate.') == \
            'Set character_desc = "You are a pirate.".'
        assert bot.holder().group_chat_keyword == ["a", "b"] and bot.holder().group_at_off is True
        # the next turn uses the new settings at once
        await bot.say("hi")
        assert bot.llm.history[-1].model == "gpt-4o"
        assert bot.llm.history[-1].messages[0]["content"] == "You are a pirate."
        assert list(tmp_path.glob(".config.json.*")) == []


async def test_a_numeric_text_value_stays_text(tmp_path):
    async with PluginBot(tmp_path) as bot:
        assert await bot.admin("/config model 1234") == 'Set model = "1234".'
        assert json.loads(bot.file_bytes())["model"] == "1234"


async def test_secrets_cannot_be_set_from_a_chat_and_the_reply_says_how(tmp_path, caplog):
    async with PluginBot(tmp_path, **SETTINGS) as bot:
        before = bot.file_bytes()
        with caplog.at_level(logging.DEBUG):
            replies = {key: await bot.admin(f"/config {key} s3cret-new-value")
                       for key in ("open_ai_api_key", "telegram_bot_token", "admin_password")}
        lead = "Nothing changed: {} is a secret and cannot be set from a chat, where the platform and the bot's " \
               "journal would keep it: "
        assert replies == {
            "open_ai_api_key": lead.format("open_ai_api_key") + "set the OPENAI_API_KEY environment variable or "
                               "edit config.json by hand; it takes effect after a restart.",
            "telegram_bot_token": lead.format("telegram_bot_token") + "set the TELEGRAM_BOT_TOKEN environment "
                                  "variable or edit config.json by hand; it takes effect after a restart.",
            "admin_password": lead.format("admin_password") + "edit config.json by hand.",
        }
        assert bot.file_bytes() == before
        assert bot.holder().open_ai_api_key == SETTINGS["open_ai_api_key"]
        assert "s3cret-new-value" not in caplog.text


async def test_a_list_setting_given_a_bare_value_gets_an_example(tmp_path):
    async with PluginBot(tmp_path) as bot:
        before = bot.file_bytes()
        assert await bot.admin("/config admin_users telegram:123") == (
            "Nothing changed: invalid value for 'admin_users': Input should be a valid list (expected a list of "
            '"<channel>:<user id>" strings). A list is written in JSON, e.g. /config admin_users ["telegram:123"]')
        assert bot.file_bytes() == before
        assert await bot.admin('/config admin_users ["telegram:123"]') == 'Set admin_users = ["telegram:123"].'


async def test_a_restart_key_shows_the_saved_and_the_running_value(tmp_path):
    async with PluginBot(tmp_path) as bot:
        assert await bot.admin("/config telegram_mode") == (
            'telegram_mode = "polling" (changes take effect after a restart)')
        await bot.admin("/config telegram_mode webhook")
        assert await bot.admin("/config telegram_mode") == (
            'telegram_mode = "webhook" in config.json; "polling" runs until a restart '
            "(this setting takes effect after a restart).")


async def test_config_never_writes_over_a_file_it_could_not_read(tmp_path):
    async with PluginBot(tmp_path, **SETTINGS, admin_users=["telegram:7"]) as bot:
        for content in ("", '{"model": "gpt-4o-mini", "admin_us'):
            bot.path.write_text(content, encoding="utf-8")  # an editor caught between truncate and write
            reply = await bot.admin("/config agent_max_steps 9")
            assert reply.startswith(f"Nothing changed: {bot.path} is ")
            assert bot.path.read_text(encoding="utf-8") == content
            assert bot.holder().admin_users == ["telegram:7"] and bot.holder().agent_max_steps == 5


async def test_a_huge_value_gets_the_size_limit_at_once(tmp_path):
    async with PluginBot(tmp_path) as bot:
        before = bot.file_bytes()
        assert await bot.admin("/config character_desc " + "x" * 1_048_576) == (
            "Nothing changed: the value is 1,048,576 characters long; a setting holds at most 20,000.")
        assert bot.file_bytes() == before


async def test_invalid_values_and_unknown_keys_change_nothing(tmp_path):
    async with PluginBot(tmp_path, **SETTINGS) as bot:
        before = bot.file_bytes()
        assert await bot.admin('/config agent_max_context_turns "x"') == (
            "Nothing changed: invalid value for 'agent_max_context_turns': Input should be a valid integer "
            "(expected an integer).")
        assert await bot.admin("/config group_at_off maybe") == (
            "Nothing changed: invalid value for 'group_at_off': Input should be a valid boolean "
            "(expected true or false).")
        assert await bot.admin("/config agent_max_context_turn 3") == (
            "Nothing changed: unknown config key 'agent_max_context_turn'; did you mean agent_max_context_turns?")
        assert await bot.admin("/config model.name x") == (
            "Nothing changed: unknown config key 'model.name'; only plugin settings have dotted names, "
            "as in plugins.<name>.<key>.")
        assert await bot.admin("/config plugins.nosuch.enabled false") == (
            "Nothing changed: unknown plugin 'nosuch'.")
        assert await bot.admin("/config plugins.tools.enabled 3") == (
            "Nothing changed: invalid value for 'plugins.tools.enabled': expected true or false.")
        assert bot.file_bytes() == before
        assert bot.holder().agent_max_context_turns == 20
        assert "current_time" in bot.tools.names()


async def test_a_restart_key_is_saved_and_says_so(tmp_path):
    async with PluginBot(tmp_path) as bot:
        assert await bot.admin("/config telegram_mode webhook") == (
            'Saved telegram_mode = "webhook"; it takes effect after a restart.')
        assert json.loads(bot.file_bytes())["telegram_mode"] == "webhook"
        assert bot.holder().telegram_mode == "polling"
        data_dir = bot.holder().data_dir
        assert await bot.admin("/config data_dir elsewhere") == (
            f'Saved data_dir = "{tmp_path / "elsewhere"}"; it takes effect after a restart.')
        assert json.loads(bot.file_bytes())["data_dir"] == "elsewhere"
        assert bot.holder().data_dir == data_dir


async def test_a_failed_write_leaves_the_old_file_and_settings(tmp_path, monkeypatch, caplog):
    async with PluginBot(tmp_path, **SETTINGS) as bot:
        before = bot.file_bytes()

        def crash(src, dst):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(config_module.os, "replace", crash)
        with caplog.at_level(logging.ERROR):
            reply = await bot.admin("/config agent_max_steps 9")
        assert reply == "Nothing changed: config.json could not be written (No space left on device)."
        assert bot.file_bytes() == before
        assert bot.holder().agent_max_steps == 5
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".config")] == []


async def test_auth_is_disabled_without_a_password(tmp_path):
    async with PluginBot(tmp_path) as bot:
        assert await bot.say("/auth guess") == "/auth is disabled: this bot has no admin password set."
        assert await bot.store.admins.all() == set()


async def test_auth_grants_admin_and_never_logs_the_password(tmp_path, caplog):
    async with PluginBot(tmp_path, admin_password="s3cret-pass") as bot:
        with caplog.at_level(logging.INFO):
            assert await bot.say("/auth") == "Usage: /auth <password>"
            assert await bot.say("/auth wrong") == "Wrong password."
            assert await bot.say("/auth s3cret-pass") == "You are now an admin."
            assert await bot.say("/auth s3cret-pass") == "You are already an admin."
        assert "/auth: wrong password from telegram:100" in caplog.text
        assert "s3cret-pass" not in caplog.text and "auth wrong" not in caplog.text
        assert await bot.store.admins.all() == {"telegram:100"}
        assert bot.dispatcher.admins.is_admin(bot.channel.message("x", user_id="100"))
        assert await bot.say("/config agent_max_steps") == "agent_max_steps = 15"
    async with PluginBot(tmp_path) as bot:  # the grant survives a restart
        assert await bot.say("/config agent_max_steps") == "agent_max_steps = 15"


async def test_auth_only_in_private_chats(tmp_path):
    async with PluginBot(tmp_path, admin_password="pw") as bot:
        assert await bot.say("/auth pw", is_group=True, chat_id="-5") == PRIVATE_ONLY_REPLY.format(command="auth")
        assert bot.dispatcher.admins.grants == set()


async def test_five_failures_lock_the_user_out_for_ten_minutes(tmp_path):
    start = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    with time_machine.travel(start, tick=False) as traveller:
        async with PluginBot(tmp_path, admin_password="right") as bot:
            for _ in range(4):
                assert await bot.say("/auth nope") == "Wrong password."
            assert await bot.say("/auth nope") == ("Wrong password. Too many attempts: /auth is locked for you "
                                                   "for 10 minutes.")
            assert await bot.say("/auth right") == "Too many wrong passwords. Try again in 10 minutes."
            # another user is not affected
            assert await bot.say("/auth right", user_id="200", chat_id="200") == "You are now an admin."
            traveller.shift(timedelta(minutes=9, seconds=1))
            assert await bot.say("/auth right") == "Too many wrong passwords. Try again in 1 minute."
            assert bot.dispatcher.admins.grants == {"telegram:200"}
            traveller.shift(timedelta(seconds=60))
            assert await bot.say("/auth right") == "You are now an admin."
            assert bot.dispatcher.admins.grants == {"telegram:200", "telegram:100"}


async def test_failures_older_than_ten_minutes_do_not_count(tmp_path):
    start = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    with time_machine.travel(start, tick=False) as traveller:
        async with PluginBot(tmp_path, admin_password="right") as bot:
            for _ in range(4):
                assert await bot.say("/auth nope") == "Wrong password."
            traveller.shift(timedelta(minutes=10))
            assert await bot.say("/auth nope") == "Wrong password."
            assert await bot.say("/auth right") == "You are now an admin."


async def test_a_lockout_survives_a_restart(tmp_path):
    start = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    with time_machine.travel(start, tick=False) as traveller:
        async with PluginBot(tmp_path, admin_password="right") as bot:
            for _ in range(3):
                assert await bot.say("/auth nope") == "Wrong password."
        async with PluginBot(tmp_path) as bot:  # failures before the restart still count
            assert await bot.say("/auth nope") == "Wrong password."
            assert await bot.say("/auth nope") == ("Wrong password. Too many attempts: /auth is locked for you "
                                                   "for 10 minutes.")
        lockouts = tmp_path / "data" / "auth_lockouts.json"
        assert lockouts.stat().st_mode & 0o777 == 0o600
        traveller.shift(timedelta(minutes=3))
        async with PluginBot(tmp_path) as bot:
            assert await bot.say("/auth right") == "Too many wrong passwords. Try again in 7 minutes."
            assert bot.dispatcher.admins.grants == set()
        traveller.shift(timedelta(minutes=7))
        async with PluginBot(tmp_path) as bot:
            assert await bot.say("/auth right") == "You are now an admin."
