"""The built-in plugins (DESIGN §6): chat commands, admin commands, memory commands and index, person notes,
/export, /usage, reminders, and the registration of the agent's tools."""
