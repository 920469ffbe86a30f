"""What each config key means: one or two plain sentences per key, the one place that says it.

The console's config form shows a key's text under it (console/config_page.py), and ``docs/gen_config.py``
writes it as the key's meaning in docs/configuration.md, so the two cannot drift. Plain text, no Markdown (the
generator formats it for the page). tests/config/test_settings.py checks that every key of ``Config`` has one,
in the model's order; tests/test_docs.py that the page says the same.
"""

from __future__ import annotations

#: a key's meaning, by key, in the model's order
KEY_HELP: dict[str, str] = {
    "channel_type": ('"terminal", "telegram", "weixin" (WeChat\'s official bot API) or "wechat" (itchat-uos web '
                     "login), an installed channel, or a list of several to run at once."),
    "model": "The chat model's name at open_ai_api_base, e.g. gpt-4o-mini.",
    "open_ai_api_key": "The API key of open_ai_api_base (a secret: OPENAI_API_KEY or a hand edit).",
    "open_ai_api_base": "Any OpenAI-compatible endpoint.",
    "summary_model": "The model that writes summaries; empty means the chat model.",
    "model_context_window": ("The model's window in tokens; 0 means look it up: the table of known models, else the "
                             "local server is asked (if nothing says: 2048 for a server on a loopback or private "
                             "address, 128000 otherwise)."),
    "character_desc": "The system prompt: who the bot is and how it answers.",
    "agent_max_context_tokens": "Token budget for the history sent to the model.",
    "agent_max_context_turns": "Most turns sent to the model; over it, the oldest half is summarised and dropped.",
    "agent_max_steps": "Most model calls (tool rounds) in one turn.",
    "single_chat_prefix": "A private message must start with one of these; \"\" means any message.",
    "single_chat_reply_prefix": "Prepended to replies in private chats.",
    "group_chat_prefix": "A group message starting with one of these triggers (the prefix is stripped).",
    "group_chat_keyword": "A group message containing one of these triggers.",
    "group_at_off": "When true, an @mention of the bot no longer triggers.",
    "group_name_white_list": "Group titles or chat ids the bot answers in; \"ALL_GROUP\" means every group.",
    "group_shared_session": "True: one conversation per group; false: one per member within the group.",
    "group_chat_reply_prefix": "Prepended to replies in groups (after the @name on WeChat).",
    "admin_users": "Entries \"<channel>:<user id>\", e.g. \"telegram:12345\"; the terminal user is always an admin.",
    "admin_password": "If set, /auth <password> in a private chat makes that user an admin.",
    "telegram_bot_token": "The bot's token from @BotFather (a secret: TELEGRAM_BOT_TOKEN or a hand edit).",
    "telegram_base_url": "A self-hosted Bot API server, or a test server.",
    "telegram_mode": "\"polling\" or \"webhook\".",
    "telegram_rate_limit": "Keep within Telegram's flood limits; false only for a self-hosted test server.",
    "telegram_webhook_url": "Public HTTPS URL Telegram posts updates to (webhook mode).",
    "telegram_webhook_listen": "Address the webhook server listens on.",
    "telegram_webhook_port": "Port the webhook server listens on.",
    "wechat_hot_reload": "Keep the WeChat login between restarts (status file in data_dir).",
    "weixin_base_url": "WeChat's official bot API (ClawBot / iLink), for channel_type \"weixin\".",
    "data_dir": "Everything the bot writes: database, memory files, login state, bot.log.",
    "db_url": "SQLAlchemy URL; empty means SQLite at <data_dir>/chatbot.db; postgresql://… for PostgreSQL.",
    "conversation_max_age_days": "Conversations idle longer than this are deleted by the cleanup job.",
    "cleanup_hour": "Local hour of the daily cleanup; it also runs once shortly after start.",
    "timezone": "IANA zone for memory file dates and the cleanup hour; empty means the system zone.",
    "web_fetch_allow_private": "Allow the web_fetch tool to reach loopback and private addresses.",
    "max_concurrent_turns": "Turns running at once across all conversations.",
    "agent_max_output_tokens": "The longest answer in tokens, sent with every request; 0 means 4,096.",
    "stream_replies": "Write the answer into the chat while it is generated (WeChat always sends it whole).",
    "group_context_messages": ("In a group, how many recent messages that did not trigger the bot the model sees with "
                               "the one that did; 0 turns it off."),
    "memory_embedding_model": ('Semantic memory search: "local" (a small model shipped as a package), "" off, or '
                               "an embeddings model at open_ai_api_base."),
    "memory_flush": "Before turns are trimmed, give the model one call to save what matters with memory_write.",
    "azure_api_version": ("For Azure OpenAI: then open_ai_api_base is the resource endpoint and model the deployment "
                          "name."),
    "plugins": "Per-plugin settings by plugin name; {\"name\": {\"enabled\": false}} turns one off.",
    "web_console_port": "The web console's port; 0 turns it off.",
    "web_console_listen": "The web console's address; anything but loopback needs web_console_password.",
    "web_console_password": ("The web console's password (a secret: WEB_CONSOLE_PASSWORD or a hand edit); on loopback, "
                             "without it, a one-time link printed at start opens the console (/console makes a new "
                             "one)."),
    "model_max_parallel": ("Model requests in flight at once to open_ai_api_base (replies and summaries together); 0 "
                           "means automatic: 1 for an endpoint on a loopback or private address, unlimited otherwise."),
    "vision": "Images to the model: \"auto\" (when the model takes images), true, false.",
    "speech_to_text_model": ("Voice messages are transcribed with this model at open_ai_api_base "
                             "(/audio/transcriptions); \"\" turns it off."),
    "usage_cap_user_daily_tokens": ("Tokens one person may use per day (all their chats); 0 means no cap; admins are "
                                    "exempt."),
    "usage_cap_group_daily_tokens": "Tokens one group may use per day; 0 means no cap.",
    "usage_cap_daily_tokens": "Tokens the whole bot may use per day; 0 means no cap.",
    "usage_fallback_model": ("When a cap is reached, answer with this (cheaper) model instead of refusing; \"\" means "
                             "refuse."),
    "mcp_servers": ("MCP servers whose tools the model may use, by name, as in Claude Desktop, Cursor or VS Code: "
                    "command/args/env/cwd (stdio) or url/headers (Streamable HTTP; transport \"sse\" for older "
                    "servers), plus enabled, timeout_seconds, tools and chats; values in env and headers are secrets."),
    "tools_window_share": ("Above this share of the model window, the tools offered are narrowed to those relevant "
                           "to the message, with find_tools for the rest."),
    "feishu_app_id": "The Feishu / Lark app's App ID (cli_…), for channel_type \"feishu\".",
    "feishu_app_secret": "The Feishu / Lark app's App Secret (a secret); checked with one call at start.",
    "feishu_domain": ("\"feishu\" (open.feishu.cn), \"lark\" (open.larksuite.com) or a base URL (a private deployment, "
                      "a test server)."),
    "dingtalk_client_id": "The DingTalk app's Client ID (AppKey), for channel_type \"dingtalk\".",
    "dingtalk_client_secret": ("The DingTalk app's Client Secret (AppSecret; a secret). The SDK's "
                               "DINGTALK_OPENAPI_ENDPOINT environment variable, when set, points the channel at "
                               "another endpoint."),
    "wecom_corp_id": "WeCom: the Corp ID of your company (My Company > Company info), for channel_type \"wecom\".",
    "wecom_agent_id": "WeCom: the AgentId of the self-built app.",
    "wecom_secret": "WeCom: the self-built app's Secret (a secret).",
    "wecom_token": "WeCom: the Token of the app's Receive messages (接收消息) settings (a secret).",
    "wecom_aes_key": "WeCom: the EncodingAESKey of the app's Receive messages settings (a secret, 43 characters).",
    "wecom_port": ("WeCom: the port of the callback server; WeCom posts to http://<host>:<port>/wecom/callback "
                   "(usually behind an HTTPS reverse proxy)."),
    "wecom_base_url": "WeCom's API; another address for a private deployment or a test server.",
    "web_chat_public": ("Also serve the web chat to anyone with the link at /chat/public on the console's port, each "
                        "visitor a session."),
    "web_chat_rate_per_minute": "Messages a minute one public web-chat visitor may send; more get a clear refusal.",
    "knowledge_max_mb": ("The largest document, in MB, the knowledge base takes (/kb add, the console, the folder); "
                         "a larger one is refused with a note."),
    "knowledge_max_pages": "The most pages a document of the knowledge base may have (a PDF's pages; about 3,000 "
                           "characters a page for the others).",
    "knowledge_auto": ("Put the best knowledge base passages for the user's message in the turn without a tool call, "
                       "within the token budget (for models that use tools poorly)."),
}
