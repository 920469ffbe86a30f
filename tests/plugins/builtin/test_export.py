"""Tests for /export (plugins/builtin/export.py, export/): one zip with export.json and export.md, on the fakes."""

from __future__ import annotations

import asyncio
import json
import stat
import zipfile
from pathlib import Path

from core.messages import IncomingMessage
from export.parts import ExportPart, Section
from plugins.builtin import export as export_plugin
from plugins.builtin.export import EXPORT_USAGE
from store.exports import PAGE
from tests.fakes.channel import RecordingChannel
from tests.plugins.harness import PluginBot

ALICE = {"chat_id": "100", "user_id": "100", "user_name": "Alice"}
SID = "telegram:100"


class FileChannel(RecordingChannel):
    """A recording channel that sends files (as Telegram does), up to ``max_file_bytes``."""

    def __init__(self, limit: int = 50_000_000, fail: bool = False) -> None:
        super().__init__("telegram")
        self.max_file_bytes = limit
        self.fail = fail
        self.files: list[tuple[IncomingMessage, str, bytes, str]] = []

    async def send_file(self, to: IncomingMessage, path: Path, *, filename: str, caption: str = "") -> None:
        if self.fail:
            raise ConnectionError("the platform is away")
        self.files.append((to, filename, await asyncio.to_thread(path.read_bytes), caption))


def use(bot: PluginBot, channel: RecordingChannel) -> None:
    """Route the bot's telegram traffic through ``channel``."""
    bot.channel = channel
    bot.dispatcher.add_channel(channel)


def opened(path: Path) -> tuple[dict, str, dict[str, bytes]]:
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        return (json.loads(z.read("export.json")), z.read("export.md").decode(),
                {n: z.read(n) for n in names if n not in ("export.json", "export.md")})


def path_in(reply: str) -> Path:
    return Path(reply.split(" to ", 1)[1].rsplit(" (", 1)[0])


async def test_the_terminal_gets_a_path_to_an_owner_only_file(tmp_path):
    async with PluginBot(tmp_path, memory_embedding_model="") as bot:
        await bot.say("my cat is Tom", terminal=True, **ALICE)
        await bot.people.add("terminal:100", "I am vegetarian.")
        reply = await bot.say("/export", terminal=True, **ALICE)  # the terminal sends no files: a path
        assert reply.startswith("Exported (2 stored messages, 1 person note) to ")
        path = path_in(reply)
        assert path.parent == tmp_path / "data" / "exports" and path.suffix == ".zip"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        again = path_in(await bot.say("/export", terminal=True, **ALICE))
        assert again != path  # a second export within the same second gets a name of its own
        assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, again.name])  # no temporary file
        data, md, files = opened(path)
    assert data["format"] == "longchat-export" and data["session"]["session_id"] == "terminal:100"
    assert [m["content"]["content"] for m in data["parts"]["history"]] == ["my cat is Tom", "echo: my cat is Tom"]
    assert data["parts"]["person_notes"]["notes"] == ["I am vegetarian."]


async def test_the_export_of_a_telegram_private_chat(tmp_path):
    async with PluginBot(tmp_path, memory_embedding_model="") as bot:
        channel = FileChannel()
        use(bot, channel)
        await bot.say("my cat is Tom", **ALICE)
        await bot.say("/context clear", **ALICE)
        await bot.say("and my dog is Rex", **ALICE)
        await bot.say("hello", chat_id="200", user_id="200", user_name="Bob")
        memory = bot.services.memory
        await memory.append(SID, "trim", "- the user has a cat called Tom")
        (memory.session_dir(SID) / "MEMORY.md").write_text("- Alice likes tea.\n", encoding="utf-8")
        await bot.people.add("telegram:100", "I am vegetarian.")
        await bot.people.add("telegram:200", "Bob plays the cello.")
        reply = await bot.say("/export", **ALICE)
        assert reply == ("Here is the export of this conversation (4 stored messages, 1 daily memory file, "
                         "MEMORY.md, 1 person note).")
        [(to, filename, blob, caption)] = channel.files
        assert to.chat_id == "100" and filename.startswith("export-telegram_100-") and filename.endswith(".zip")
        assert caption.startswith("Export of this conversation: 4 stored messages")
        assert list((tmp_path / "data" / "exports").iterdir()) == []  # sent, so not kept
        zipped = tmp_path / "sent.zip"
        zipped.write_bytes(blob)
        data, md, files = opened(zipped)
    parts = data["parts"]
    assert [(m["role"], m["content"]["content"], m["in_context"]) for m in parts["history"]] == [
        ("user", "my cat is Tom", False), ("assistant", "echo: my cat is Tom", False),
        ("user", "and my dog is Rex", True), ("assistant", "echo: and my dog is Rex", True)]
    assert all(m["created_at"].endswith("+00:00") for m in parts["history"])
    assert parts["summary"]["session_id"] == SID and parts["summary"]["context_start_seq"] == 3
    [daily] = parts["memory_files"]
    assert "- the user has a cat called Tom" in daily["text"]
    assert parts["notes"]["text"] == "- Alice likes tea.\n"
    assert parts["person_notes"] == {"person": "telegram:100", "notes": ["I am vegetarian."]}
    assert data["failed"] == {}
    assert "cello" not in json.dumps(data) and "cello" not in md and b"cello" not in b"".join(files.values())
    assert sorted(files) == sorted(["memory/MEMORY.md", daily["file"], "person/PERSON.md"])
    assert md.startswith(f"# Export of {SID}")
    for heading in ("## Conversation", "## History", "## Daily memory files", "## Long-term notes (MEMORY.md)",
                    "## Your person notes (PERSON.md)"):
        assert heading in md
    assert "> my cat is Tom" in md and "no longer in the context" in md and "1. I am vegetarian." in md


async def test_a_shared_group_is_exported_by_admins_only_and_without_person_notes(tmp_path):
    async with PluginBot(tmp_path, memory_embedding_model="", group_shared_session=True,
                         admin_users=["telegram:1"]) as bot:
        channel = FileChannel()
        use(bot, channel)
        group = {"is_group": True, "chat_id": "-5", "group_name": "Team"}
        await bot.people.add("telegram:1", "The admin's private note.")
        await bot.say("@bot hello all", **group, user_id="2", user_name="Bob")
        assert await bot.say("/export", **group, user_id="2", user_name="Bob") == (
            "Sorry, only admins can export a shared group conversation.")
        assert channel.files == []
        assert (await bot.say("/export", **group, user_id="1", user_name="Ann")).startswith("Here is the export")
        [(_, _, blob, _)] = channel.files
        zipped = tmp_path / "group.zip"
        zipped.write_bytes(blob)
        data, md, files = opened(zipped)
    assert data["parts"]["person_notes"] is None and data["person"] is None
    assert "private note" not in json.dumps(data) and "private note" not in md and "person/PERSON.md" not in files
    assert "Not included in a group chat" in md
    assert [m["content"]["content"] for m in data["parts"]["history"]] == ["[Bob] hello all", "echo: [Bob] hello all"]


async def test_too_large_or_unsent_exports_stay_on_disk_with_a_clear_answer(tmp_path):
    async with PluginBot(tmp_path, memory_embedding_model="") as bot:
        use(bot, FileChannel(limit=100))
        await bot.say("hello", **ALICE)
        reply = await bot.say("/export", **ALICE)
        assert reply.startswith("The export is ") and " bytes, more than the 100 bytes I can send here. It is saved " \
            "on the bot's computer as " in reply
        assert len(list((tmp_path / "data" / "exports").glob("*.zip"))) == 1
        use(bot, FileChannel(fail=True))
        reply = await bot.say("/export", **ALICE)
        assert reply.startswith("Sorry, the export could not be sent. It is saved on the bot's computer as ")
        assert len(list((tmp_path / "data" / "exports").glob("*.zip"))) == 2
        assert await bot.say("/export everything", **ALICE) == EXPORT_USAGE


async def test_a_long_history_is_read_page_by_page_and_parts_can_be_added(tmp_path, monkeypatch):
    async with PluginBot(tmp_path, memory_embedding_model="") as bot:
        await bot.say("first", terminal=True, **ALICE)
        n = PAGE * 2 + 7
        await bot.store.sessions.append("terminal:100", [{"role": "user", "content": f"message {i}"} for i in range(n)])

        async def reminders(request):
            return Section(data=[{"text": "call mum"}], markdown="- call mum", summary="1 reminder")

        async def broken(request):
            raise RuntimeError("boom")

        parts = export_plugin.default_parts()
        parts.register(ExportPart("reminders", "Reminders", reminders))
        parts.register(ExportPart("notes", "Long-term notes (MEMORY.md)", broken))
        monkeypatch.setattr(export_plugin, "PARTS", parts)
        reply = await bot.say("/export", terminal=True, **ALICE)
        assert f"{n + 2:,} stored messages" in reply and "1 reminder" in reply
        assert "could not export: notes (see the log)" in reply
        data, md, _ = opened(path_in(reply))
    history = data["parts"]["history"]
    assert [m["seq"] for m in history] == list(range(1, n + 3))
    assert history[-1]["content"]["content"] == f"message {n - 1}"
    assert data["parts"]["reminders"] == [{"text": "call mum"}]
    assert "notes" not in data["parts"] and data["failed"] == {"notes": "RuntimeError: boom"}
    assert "## Reminders\n\n- call mum" in md
    assert "## Long-term notes (MEMORY.md)\n\n(This part could not be exported" in md


async def test_the_photos_of_the_conversation_go_in_as_files(tmp_path):
    import io

    from PIL import Image

    from media.files import save_image

    picture = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(picture, "PNG")
    async with PluginBot(tmp_path, memory_embedding_model="") as bot:
        await bot.say("hello", terminal=True, **ALICE)
        data_dir = tmp_path / "data"
        saved = save_image(data_dir, "terminal:100", picture.getvalue(), stem="photo")
        save_image(data_dir, "terminal:200", picture.getvalue(), stem="bobs")  # another chat's photo stays out
        reply = await bot.say("/export", terminal=True, **ALICE)
        assert "1 image" in reply
        data, md, files = opened(path_in(reply))
    name = f"images/{Path(saved.file).name}"
    assert data["parts"]["images"] == [{"file": name, "bytes": saved.bytes}]
    assert [n for n in files if n.startswith("images/")] == [name]
    assert files[name] == (data_dir / saved.file).read_bytes() and files[name][:2] == b"\xff\xd8"  # a JPEG
    assert f"## Images\n\n- {name}" in md


def test_sizes_read_as_people_write_them():
    from plugins.builtin.export import size_text

    assert [size_text(n) for n in (812, 12_345, 50_000_000)] == ["812 bytes", "12.3 KB", "50.0 MB"]


async def test_the_reminders_of_the_conversation_go_in(tmp_path):
    async with PluginBot(tmp_path, memory_embedding_model="", timezone="Europe/Berlin") as bot:
        answer = await bot.say("/remind 2027-12-24 08:00 buy the tree", terminal=True, **ALICE)
        assert "2027" in answer
        await bot.say("/remind 2027-12-25 09:00 call the family", chat_id="200", user_id="200", user_name="Bob",
                      terminal=True)  # another chat's reminder stays out
        reply = await bot.say("/export", terminal=True, **ALICE)
        assert "1 reminder" in reply
        data, md, _ = opened(path_in(reply))
    [reminder] = data["parts"]["reminders"]
    assert (reminder["text"], reminder["status"], reminder["every"]) == ("buy the tree", "pending", None)
    assert reminder["due_at"] == "2027-12-24T07:00:00+00:00"  # 08:00 in Berlin's winter
    assert "## Reminders\n\n- 2027-12-24 08:00 (pending): buy the tree" in md
