"""Errors a user can fix; the CLI prints them as one message and an exit code, never a traceback."""

from __future__ import annotations


class HpckitError(Exception):
    """A failure the user can act on. `exit_code` 2: bad input or usage; 1: the operation failed."""

    exit_code = 1


class InputError(HpckitError):
    exit_code = 2
