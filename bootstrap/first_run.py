"""The first start in a fresh clone: ``config.json`` is created, owner-only, because git does not track it.

A key typed into a tracked config file ends up in ``git diff`` and, one ``git commit -a`` later, in the
history. So the repository ships no ``config.json`` (``.gitignore`` names it) and ``python app.py`` writes
this starter file the first time it runs without ``--config``; environment variables stay the documented
way to give the bot its secrets.
"""

from __future__ import annotations

import logging
from pathlib import Path

from config.settings import DEFAULT_API_BASE, atomic_write_json

logger = logging.getLogger(__name__)

#: What a fresh clone's config.json holds: the keys a new user edits first, at their defaults.
STARTER_CONFIG = {
    "channel_type": "terminal",
    "model": "gpt-4o-mini",
    "open_ai_api_base": DEFAULT_API_BASE,
    "agent_max_context_tokens": 50000,
    "agent_max_context_turns": 20,
    "agent_max_steps": 15,
    "data_dir": "data",
    "db_url": "",
}


def create_config(path: Path) -> bool:
    """Write the starter config to ``path`` if nothing is there yet (owner-only); True if it was written.

    A folder that cannot be written is no error here: the bot runs on the defaults, as with an absent file.
    """
    if path.exists():
        return False
    try:
        atomic_write_json(path, STARTER_CONFIG)  # mkstemp: created owner-only
    except OSError:
        return False
    return True
