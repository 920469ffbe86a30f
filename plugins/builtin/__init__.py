"""The built-in plugins (DESIGN §6): chat commands, admin commands and the agent's tools; and the config watcher."""
