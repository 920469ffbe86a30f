"""Summaries of dropped turns: jobs, parts, prompt, fact check."""
