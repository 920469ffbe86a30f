"""Start-up: preflight checks, logging, lifecycle."""
