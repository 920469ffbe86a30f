"""The web chat (DESIGN §5): a chat page in the web console and, with ``web_chat_public``, one for anyone."""
