"""Usage you can see and caps that protect the bill (DESIGN §12)."""
