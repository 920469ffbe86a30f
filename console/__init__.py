"""The web console (DESIGN §11): server-rendered pages on aiohttp inside the bot process.

``server.py`` starts and stops it and holds the access rules (``auth.py``); each page lives in its own
module and reads from the database and the data folder, so any process on a shared PostgreSQL serves
the same data. Templates are Jinja2 files in ``templates/``; the only script is the live log tail's.
"""
