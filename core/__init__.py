"""The lowest layer: boundary types, errors and small shared helpers every package may import.

Nothing here imports another package of the project (``pyproject.toml`` ``[tool.importlinter]`` checks it), so
none of them needs to import another one for its types.
"""
