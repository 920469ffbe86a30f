"""The Telegram channel (python-telegram-bot)."""
