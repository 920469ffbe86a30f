"""``/export`` (DESIGN §1.4): everything stored for a session, as one zip of ``export.json`` and ``export.md``.

:mod:`export.parts` holds the sections (a small registry each feature adds its own part to);
:mod:`export.writer` streams them into the file.
"""
