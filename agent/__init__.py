"""The turn-based, tool-using agent and its context management."""
