"""Persistence and memory: the conversation store, summaries, daily memory files and cleanup."""
