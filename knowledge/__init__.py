"""The knowledge base (issue 46, DESIGN §14): documents the bot answers from, with citations, per scope.

``parse`` reads PDF, DOCX, Markdown, HTML and text; ``chunk`` cuts them by page and heading; ``base`` indexes
them (the local embedding model of ``memory_embedding_model``, int8 vectors in the database) and searches them
by words and meaning; ``scopes`` says which documents a chat may see; ``folder`` watches
``<data_dir>/knowledge/<scope>/``. Its registration (``/kb``, ``knowledge_search``, the turn's prompt) is the
built-in plugin ``plugins/builtin/knowledge.py``; its tables are ``store/knowledge.py``.
"""
