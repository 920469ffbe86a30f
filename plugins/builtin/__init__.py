"""The built-in plugins (DESIGN §6): chat commands, admin commands, memory, person-note, export, usage and reminder
commands, the memory index and the agent's tools. The config watcher is ``config/watch.py``."""
