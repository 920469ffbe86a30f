"""Messaging channels: terminal, Telegram, WeChat, and the dispatcher between them and the agent."""
