"""The built-in checks. Importing a module registers its checks; :func:`load` imports them all once."""

from __future__ import annotations

import threading

_lock = threading.Lock()
_loaded = False


def load() -> None:
    global _loaded
    with _lock:  # threads of one sweep must not see a half-filled registry
        if _loaded:
            return
        from hpckit.health.checks import gpu, heavy, host, ib  # noqa: F401  (registration by import)

        _loaded = True
