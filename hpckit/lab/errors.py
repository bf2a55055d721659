"""The one error type the lab raises for anything a user can fix (not root, missing package, bad spec)."""

from __future__ import annotations

from hpckit.errors import HpckitError


class LabError(HpckitError):
    """A lab operation cannot go on; the message says what is wrong and where."""
