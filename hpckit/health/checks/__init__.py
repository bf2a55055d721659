"""The built-in checks. Importing a module registers its checks; :func:`load` imports them all once."""

from __future__ import annotations

_loaded = False


def load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from hpckit.health.checks import gpu, heavy, host, ib  # noqa: F401  (registration by import)
