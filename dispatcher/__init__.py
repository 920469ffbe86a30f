"""From an incoming message to a reply: triggers, session identity, commands, the journal, per-session
workers, crash resume and replies. Channels hand messages in; nothing here knows a platform.

Nothing is imported here, so a channel can use :mod:`dispatcher.commands` (which commands carry secrets)
without loading the dispatcher itself.
"""
