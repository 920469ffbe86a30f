"""Long-term memory: the daily memory files, ``MEMORY.md`` notes and person notes, the hybrid search over them
(keywords and embeddings), the history's semantic index for ``history_search``, and ``/forget``. The
conversation store is ``store/``; summaries are ``summaries/``; cleanup is ``store/retention.py``."""
