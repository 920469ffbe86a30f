"""Long-term memory: the daily memory files and notes, person notes, the semantic index and search, and /forget."""
