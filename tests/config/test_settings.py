"""Tests for config/settings.py."""

import json
from pathlib import Path

import pytest

from config.help import KEY_HELP
from config.settings import (
    KNOWN_KEYS,
    SECRET_KEYS,
    Config,
    ConfigHolder,
    atomic_write_json,
    load_config,
    mask_secret,
    normalise_db_url,
)
from core.errors import ConfigError


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


CONTRACT_KEYS = """channel_type model open_ai_api_key open_ai_api_base summary_model model_context_window
character_desc agent_max_context_tokens agent_max_context_turns agent_max_steps single_chat_prefix
single_chat_reply_prefix group_chat_prefix group_chat_keyword group_at_off group_name_white_list
group_shared_session group_chat_reply_prefix admin_users admin_password telegram_bot_token telegram_base_url
telegram_mode telegram_rate_limit telegram_webhook_url telegram_webhook_listen telegram_webhook_port
wechat_hot_reload data_dir db_url conversation_max_age_days cleanup_hour timezone web_fetch_allow_private
max_concurrent_turns plugins agent_max_output_tokens stream_replies group_context_messages memory_embedding_model
memory_flush azure_api_version weixin_base_url web_console_port web_console_listen web_console_password
model_max_parallel vision speech_to_text_model usage_cap_user_daily_tokens usage_cap_group_daily_tokens
usage_cap_daily_tokens usage_fallback_model mcp_servers tools_window_share
feishu_app_id feishu_app_secret feishu_domain dingtalk_client_id dingtalk_client_secret
wecom_corp_id wecom_agent_id wecom_secret wecom_token wecom_aes_key
wecom_port wecom_base_url web_chat_public web_chat_rate_per_minute
knowledge_max_mb knowledge_max_pages knowledge_auto""".split()


def test_defaults_cover_every_contract_key():
    cfg = Config()
    assert cfg.channel_type == "terminal"
    assert cfg.model == "gpt-4o-mini"
    assert cfg.open_ai_api_base == "https://api.openai.com/v1"
    assert cfg.agent_max_context_tokens == 50000
    assert cfg.agent_max_context_turns == 20
    assert cfg.agent_max_steps == 15
    assert cfg.single_chat_prefix == [""]
    assert cfg.group_chat_prefix == ["@bot"]
    assert cfg.group_name_white_list == ["ALL_GROUP"]
    assert cfg.telegram_base_url == "https://api.telegram.org/bot"
    assert cfg.telegram_webhook_listen == "127.0.0.1"
    assert cfg.weixin_base_url == "https://ilinkai.weixin.qq.com"
    assert cfg.telegram_webhook_port == 8443
    assert cfg.conversation_max_age_days == 30
    assert cfg.cleanup_hour == 3
    assert cfg.max_concurrent_turns == 64
    assert cfg.plugins == {}
    assert cfg.agent_max_output_tokens == 0
    assert cfg.stream_replies is True
    assert cfg.group_context_messages == 20
    assert cfg.memory_embedding_model == "local"
    assert cfg.memory_flush is False
    assert cfg.azure_api_version == ""
    assert cfg.web_console_port == 8700
    assert cfg.web_console_listen == "127.0.0.1"
    assert cfg.web_console_password == ""
    assert cfg.model_max_parallel == 0
    assert cfg.vision == "auto"
    assert cfg.speech_to_text_model == "whisper-1"
    assert (cfg.usage_cap_user_daily_tokens, cfg.usage_cap_group_daily_tokens, cfg.usage_cap_daily_tokens) == (0, 0, 0)
    assert cfg.usage_fallback_model == ""
    assert (cfg.mcp_servers, cfg.tools_window_share) == ({}, 0.15)
    assert (cfg.wecom_corp_id, cfg.wecom_agent_id, cfg.wecom_secret, cfg.wecom_token, cfg.wecom_aes_key) == ("",) * 5
    assert (cfg.wecom_port, cfg.wecom_base_url) == (8701, "https://qyapi.weixin.qq.com")
    assert (cfg.web_chat_public, cfg.web_chat_rate_per_minute) == (False, 6)
    assert (cfg.feishu_app_id, cfg.feishu_app_secret, cfg.feishu_domain) == ("", "", "feishu")
    assert (cfg.dingtalk_client_id, cfg.dingtalk_client_secret) == ("", "")
    assert {"feishu_app_secret", "dingtalk_client_secret"} <= SECRET_KEYS
    assert (cfg.knowledge_max_mb, cfg.knowledge_max_pages, cfg.knowledge_auto) == (50, 2000, False)
    assert set(Config.model_fields) == set(CONTRACT_KEYS)


def test_every_key_has_one_line_of_help():
    assert list(KEY_HELP) == list(KNOWN_KEYS)  # the model's order, every key, nothing else
    for key, text in KEY_HELP.items():
        assert text and text == text.strip() and "\n" not in text and "`" not in text, key


def test_the_web_console_password_is_a_secret_that_the_environment_sets(tmp_path):
    from config.settings import RESTART_KEYS, SECRET_KEYS

    path = write(tmp_path, {"web_console_password": "from-the-file"})
    assert load_config(path, environ={}).web_console_password == "from-the-file"
    assert load_config(path, environ={"WEB_CONSOLE_PASSWORD": "from-env"}).web_console_password == "from-env"
    assert "web_console_password" in SECRET_KEYS
    assert {"web_console_port", "web_console_listen"} <= RESTART_KEYS


def test_unknown_key_is_named_with_a_suggestion(tmp_path):
    path = write(tmp_path, {"agent_max_context_turn": 5})
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert str(err.value) == "unknown config key 'agent_max_context_turn'; did you mean agent_max_context_turns?"


def test_every_unknown_key_is_named_at_once_with_its_suggestion(tmp_path):
    path = write(tmp_path, {"agent_max_context_turn": 5, "modle": "x", "zzz_nothing_like_it": 1})
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert str(err.value) == ("unknown config keys: 'agent_max_context_turn' (did you mean agent_max_context_turns?), "
                              "'modle' (did you mean model?), 'zzz_nothing_like_it'")


def test_an_empty_file_is_an_error_not_all_defaults(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert str(err.value) == f"{path} is empty; write {{}} in it for all defaults"
    assert load_config(tmp_path / "absent.json", environ={}) == load_config(write(tmp_path, {}), environ={})


#: A config.json as chatgpt-on-wechat (CowAgent) users have it, keys and values from its config template.
COWAGENT_FILE = {
    "channel_type": "wx",
    "model": "gpt-4o-mini",
    "open_ai_api_key": "sk-cow-0123456789",
    "open_ai_api_base": "https://api.openai.com/v1",
    "proxy": "",
    "hot_reload": False,
    "single_chat_prefix": ["bot", "@bot"],
    "single_chat_reply_prefix": "[bot] ",
    "group_chat_prefix": ["@bot"],
    "group_name_white_list": ["ChatGPT测试群", "ChatGPT测试群2"],
    "group_chat_in_one_session": ["ChatGPT测试群"],
    "image_create_prefix": ["画", "看", "找"],
    "conversation_max_tokens": 1000,
    "speech_recognition": False,
    "character_desc": "你是ChatGPT, 一个由OpenAI训练的大型语言模型。",
    "temperature": 0.9,
    "expires_in_seconds": 3600,
    "subscribe_msg": "感谢您的关注！",
    "use_linkai": False,
    "appdata_dir": "",
    "agent_max_context_tokens": 40000,
    "agent_max_context_turns": 30,
    "agent_max_steps": 15,
}


def test_a_cowagent_file_starts_with_its_keys_mapped_and_the_rest_reported_once(tmp_path):
    path = write(tmp_path, COWAGENT_FILE)
    notes: list[str] = []
    cfg = load_config(path, environ={}, notes=notes)
    assert cfg.channel_type == "wechat" and cfg.wechat_hot_reload is False
    assert cfg.single_chat_prefix == ["bot", "@bot"] and cfg.single_chat_reply_prefix == "[bot] "
    assert cfg.agent_max_context_tokens == 40000 and cfg.agent_max_context_turns == 30
    assert cfg.character_desc.startswith("你是ChatGPT")
    assert cfg.data_dir == str(tmp_path / "data")  # an empty appdata_dir keeps the default
    assert notes == [
        'chatgpt-on-wechat settings mapped: channel_type "wx" -> "wechat", hot_reload -> wechat_hot_reload',
        "chatgpt-on-wechat settings ignored (no counterpart here): proxy, group_chat_in_one_session, "
        "image_create_prefix, conversation_max_tokens, speech_recognition, temperature, expires_in_seconds, "
        "subscribe_msg, use_linkai, appdata_dir",
    ]


def test_a_cowagent_file_with_a_typo_names_every_unknown_key_but_not_its_own_keys(tmp_path):
    path = write(tmp_path, {**COWAGENT_FILE, "group_chat_prefx": ["@bot"], "singel_chat_prefix": [""]})
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert str(err.value) == ("unknown config keys: 'group_chat_prefx' (did you mean group_chat_prefix?), "
                              "'singel_chat_prefix' (did you mean single_chat_prefix?)")


def test_our_own_spelling_wins_over_cowagents(tmp_path):
    path = write(tmp_path, {"hot_reload": False, "wechat_hot_reload": True, "appdata_dir": "cow"})
    notes: list[str] = []
    cfg = load_config(path, environ={}, notes=notes)
    assert cfg.wechat_hot_reload is True
    assert cfg.data_dir == str(tmp_path / "cow")
    assert notes == ["chatgpt-on-wechat settings mapped: appdata_dir -> data_dir",
                     "chatgpt-on-wechat settings ignored (no counterpart here): hot_reload"]


def test_wrong_type_names_the_key(tmp_path):
    path = write(tmp_path, {"agent_max_context_turns": "twenty"})
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert "'agent_max_context_turns'" in str(err.value)
    assert "expected an integer" in str(err.value)
    path = write(tmp_path, {"group_at_off": "yes"})
    with pytest.raises(ConfigError, match="'group_at_off'.*true or false"):
        load_config(path, environ={})


def test_vision_takes_auto_or_a_boolean_and_caps_are_not_negative(tmp_path):
    assert load_config(write(tmp_path, {"vision": False}), environ={}).vision is False
    assert load_config(write(tmp_path, {"vision": "auto"}), environ={}).vision == "auto"
    with pytest.raises(ConfigError, match="'vision'"):
        load_config(write(tmp_path, {"vision": "sometimes"}), environ={})
    with pytest.raises(ConfigError, match="'usage_cap_daily_tokens'"):
        load_config(write(tmp_path, {"usage_cap_daily_tokens": -5}), environ={})


def test_bad_json_is_one_clear_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model": "x",}', encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(path, environ={})


def test_environment_overrides_the_file(tmp_path):
    path = write(tmp_path, {"open_ai_api_key": "sk-file", "telegram_bot_token": "file-token"})
    cfg = load_config(path, environ={"OPENAI_API_KEY": "sk-env", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
                                     "TELEGRAM_BOT_TOKEN": "env-token"})
    assert cfg.open_ai_api_key == "sk-env"
    assert cfg.open_ai_api_base == "http://127.0.0.1:9/v1"
    assert cfg.telegram_bot_token == "env-token"
    assert load_config(path, environ={}).open_ai_api_key == "sk-file"


def test_relative_paths_resolve_against_the_config_folder(tmp_path, monkeypatch):
    sub = tmp_path / "conf"
    sub.mkdir()
    path = write(sub, {"data_dir": "state", "db_url": "sqlite:///db/x.db"})
    monkeypatch.chdir(tmp_path)
    cfg = load_config(path, environ={})
    assert cfg.data_dir == str(sub / "state")
    assert cfg.database_url() == f"sqlite:///{sub / 'db' / 'x.db'}"
    default = load_config(write(sub, {}), environ={})
    assert default.database_url() == f"sqlite:///{sub / 'data' / 'chatbot.db'}"


def test_postgres_url_is_normalised():
    assert normalise_db_url("postgresql://u@h/db", Path("/d")) == "postgresql+psycopg://u@h/db"
    assert normalise_db_url("postgres://u@h/db", Path("/d")) == "postgresql+psycopg://u@h/db"


def test_sqlite_urls_use_the_standard_driver():
    assert normalise_db_url("", Path("/d")) == "sqlite:////d/chatbot.db"
    assert normalise_db_url("sqlite:////x/c.db", Path("/d")) == "sqlite:////x/c.db"  # older spelling
    assert normalise_db_url("sqlite:////x/c.db", Path("/d")) == "sqlite:////x/c.db"


def test_channel_list_and_model_configured():
    assert Config(channel_type=["terminal", "telegram"]).channels == ["terminal", "telegram"]
    assert not Config().model_configured
    assert Config(open_ai_api_key="sk-1").model_configured
    assert Config(open_ai_api_base="http://127.0.0.1:11434/v1").model_configured
    # the channel registry, not the config model, knows the channels: tests/channels/test_registry.py
    assert Config(channel_type="irc").channels == ["irc"]


def test_mask_secret_shows_a_password_as_set_and_a_key_by_its_last_4_characters_at_most():
    assert mask_secret("open_ai_api_key", "sk-abcdefghijklmnopa1b2") == "sk-…a1b2"
    assert mask_secret("open_ai_api_key", "") == "not set"
    assert mask_secret("telegram_bot_token", "123456789:AAbcdefghijklmnopqrstuvwxyz0123") == "…0123"
    assert mask_secret("open_ai_api_key", "abcdefghijklmno") == "set"  # too short to show any of it
    assert mask_secret("admin_password", "hunter2-pass") == "set"
    assert mask_secret("admin_password", "a-very-long-password-of-forty-characters") == "set"
    assert mask_secret("admin_password", "") == "not set"


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path):
    path = write(tmp_path, {"model": "old"})
    before = path.read_bytes()
    with pytest.raises(TypeError):
        atomic_write_json(path, {"model": object()})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]
    atomic_write_json(path, {"model": "new"})
    assert json.loads(path.read_text())["model"] == "new"


def test_holder_reports_changed_keys():
    holder = ConfigHolder(Config())
    seen = []
    holder.on_change(lambda old, new: seen.append((old.model, new.model)))
    assert holder.replace(Config(model="gpt-4.1")) == ["model"]
    assert holder().model == "gpt-4.1"
    assert seen == [("gpt-4o-mini", "gpt-4.1")]
