"""Built-in plugin: ``/me``, ``/me forget <n>``, ``/me forget all`` and ``/me add <text>`` (DESIGN §1.4, §1.6).

A person's notes (PERSON.md, :mod:`memory.person`) are read and changed only in their private chat; in a
group, ``/me`` answers that it works in the private chat (the dispatcher's private-only reply).
"""

from __future__ import annotations

import logging

from dispatcher.commands import CommandRequest
from memory.person import PERSON_FILE
from plugins.hookspecs import hookimpl

logger = logging.getLogger(__name__)

ME_USAGE = ("Usage: /me lists what I keep about you; /me forget <n> deletes one note; /me forget all deletes "
            "them all; /me add <text> adds one.")
WHERE_USED = ("I use them in this private chat and in your own conversations with me in groups where each member "
              "has their own; never in a group conversation shared with others.")
NO_NOTES = ("I keep no notes about you. Ask me here to remember something about you (or send /me add <text>), "
            "and I will know it in this chat and in your own group conversations with me; never in a group "
            "conversation shared with others.")


@hookimpl
def register_commands(register) -> None:
    """Register /me (private chats only)."""
    register("me", me_command, "what I keep about you across your chats; /me forget <n> or /me forget all "
                               "deletes", private_only=True)


def listing(notes: list[str]) -> str:
    """The person's notes, numbered, with where they are used."""
    lines = [f"What I keep about you ({len(notes)} note{'s' if len(notes) != 1 else ''}, {PERSON_FILE}). "
             + WHERE_USED]
    lines += [f"{i}. {note}" for i, note in enumerate(notes, start=1)]
    lines.append("Delete one with /me forget <n>, or all with /me forget all.")
    return "\n".join(lines)


async def me_command(request: CommandRequest) -> str:
    """List the speaker's person notes, delete one or all of them, or add one."""
    people = request.services.people
    person = request.user_key
    argv = request.command.args.split(maxsplit=1)
    verb = argv[0].lower() if argv else ""
    if not verb:
        notes = people.notes(person)
        return listing(notes) if notes else NO_NOTES
    if verb == "add" and len(argv) == 2:
        return (await people.add(person, argv[1])).message()
    if verb != "forget" or len(argv) != 2:
        return ME_USAGE
    which = argv[1].strip().lower()
    if which == "all":
        gone = await people.remove(person, None)
        return (f"Deleted all {len(gone)} of your notes." if len(gone) != 1 else "Deleted your one note.") \
            if gone else "There was nothing to delete: I keep no notes about you."
    if not which.isdigit():
        return ME_USAGE
    gone = await people.remove(person, int(which))
    if not gone:
        count = len(people.notes(person))
        have = f"you have {count} note{'s' if count != 1 else ''}" if count else "I keep no notes about you"
        return f"There is no note {which}: {have}. Send /me to see them."
    return f"Deleted note {which}: {gone[0]}"
