"""chatgpt-on-wechat (CowAgent) config files: its keys with a counterpart here, and the keys ignored.

A CowAgent ``config.json`` starts as it is: keys with a counterpart are mapped to ours, CowAgent keys we
do not use are dropped and reported together in one line, and any other unknown key is left for
``config.validate_data`` to report with a suggestion. This module knows CowAgent's names only; the caller
passes our keys (``config.KNOWN_KEYS``), so it imports nothing of ``config``.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

#: CowAgent keys with a true counterpart here, and the key they become. Keys both projects spell the same
#: (model, open_ai_api_key, the prefixes, character_desc, agent_max_*, ...) need no entry.
COWAGENT_KEY_MAP = {
    "hot_reload": "wechat_hot_reload",  # itchat keeps its login between restarts
    "appdata_dir": "data_dir",  # where the bot keeps its state (an empty value means the default here)
}
#: CowAgent's values of channel_type with a counterpart here.
COWAGENT_CHANNELS = {"wx": "wechat"}
#: CowAgent (chatgpt-on-wechat) keys that have no counterpart here: accepted, reported once as ignored.
#: conversation_max_tokens and expires_in_seconds bound a short-lived context; here the budget is
#: agent_max_context_tokens / agent_max_context_turns and nothing said is forgotten.
COWAGENT_IGNORED = frozenset({
    "agent", "always_reply_voice", "azure_deployment_id", "azure_openai_dalle_api_base",
    "azure_openai_dalle_api_key", "azure_openai_dalle_deployment_id", "azure_voice_api_key",
    "azure_voice_region", "baidu_api_key", "baidu_app_id", "baidu_dev_pid", "baidu_secret_key",
    "baidu_translate_app_id", "baidu_translate_app_key", "baidu_wenxin_api_key", "baidu_wenxin_model",
    "baidu_wenxin_secret_key", "bot_type", "chat_start_time", "chat_stop_time", "chat_time_module",
    "claude_api_cookie", "claude_api_key", "claude_uuid", "clear_memory_commands", "concurrency_in_session",
    "conversation_max_tokens", "dalle3_image_quality", "dalle3_image_style", "dashscope_api_key", "debug",
    "dingtalk_card_enabled", "enable_thinking", "expires_in_seconds", "feishu_bot_name", "feishu_port",
    "feishu_token", "frequency_penalty", "gemini_api_key", "group_chat_exit_group", "group_chat_in_one_session",
    "group_chat_reply_suffix", "group_name_keyword_white_list", "group_speech_recognition",
    "group_welcome_msg", "image_create_prefix", "image_create_size", "image_proxy", "linkai_api_base",
    "linkai_api_key", "linkai_app_code", "max_media_send_count", "media_send_interval", "Minimax_api_key",
    "Minimax_base_url", "Minimax_group_id", "moonshot_api_key", "moonshot_base_url", "nick_name_black_list",
    "plugin_trigger_prefix", "presence_penalty", "proxy", "qwen_access_key_id", "qwen_access_key_secret",
    "qwen_agent_key", "qwen_app_id", "qwen_node_id", "rate_limit_chatgpt", "rate_limit_dalle",
    "request_timeout", "single_chat_reply_suffix", "speech_recognition", "subscribe_msg", "temperature",
    "text_to_image", "text_to_voice", "text_to_voice_model", "timeout", "top_p", "translate",
    "trigger_by_self", "tts_voice_id", "use_azure_chatgpt", "use_global_plugin_config", "use_linkai",
    "voice_reply_voice", "voice_to_text", "wechatcom_corp_id", "wechatcomapp_aes_key", "wechatcomapp_agent_id",
    "wechatcomapp_port", "wechatcomapp_secret", "wechatcomapp_token", "wechatmp_aes_key", "wechatmp_app_id",
    "wechatmp_app_secret", "wechatmp_port", "wechatmp_token", "wechaty_puppet_service_token", "wework_smart",
    "xi_api_key", "xi_voice_id", "xunfei_api_key", "xunfei_api_secret", "xunfei_app_id", "zhipu_ai_api_base",
    "zhipu_ai_api_key", "zhipu_ai_knowledge_id",
})


def translate(data: dict[str, Any], known: Collection[str], notes: list[str] | None = None) -> dict[str, Any]:
    """The settings with CowAgent's spellings mapped to ours and its keys without a counterpart dropped.

    ``known``: our keys (a CowAgent key we spell the same way is ours). What was mapped and what is
    ignored is appended to ``notes`` (one line each) for the log.
    """
    out: dict[str, Any] = {}
    mapped, ignored = [], []
    for key, value in data.items():
        if key in COWAGENT_KEY_MAP and key not in known:
            ours = COWAGENT_KEY_MAP[key]
            if ours in data or (ours == "data_dir" and value == ""):  # ours wins; "" means the default
                ignored.append(key)
            else:
                out[ours] = value
                mapped.append(f"{key} -> {ours}")
        elif key in COWAGENT_IGNORED:
            ignored.append(key)
        elif key == "channel_type" and _cow_channels(value) != value:
            out[key] = _cow_channels(value)
            mapped.append(f"channel_type {json.dumps(value)} -> {json.dumps(out[key])}")
        else:
            out[key] = value
    if notes is not None:
        if mapped:
            notes.append("chatgpt-on-wechat settings mapped: " + ", ".join(mapped))
        if ignored:
            notes.append("chatgpt-on-wechat settings ignored (no counterpart here): " + ", ".join(ignored))
    return out


def setting_error(key: str, known: Collection[str]) -> str | None:
    """Why ``/config <key>`` cannot take a CowAgent name (and which key to use), or None for any other key."""
    if key in COWAGENT_KEY_MAP and key not in known:
        return f"{key!r} is chatgpt-on-wechat's name; here it is {COWAGENT_KEY_MAP[key]}"
    if key in COWAGENT_IGNORED:
        return f"{key!r} is a chatgpt-on-wechat setting with no counterpart here"
    return None


def _cow_channels(value: Any) -> Any:
    if isinstance(value, str):
        return COWAGENT_CHANNELS.get(value, value)
    if isinstance(value, list):
        return [COWAGENT_CHANNELS.get(v, v) if isinstance(v, str) else v for v in value]
    return value
