"""hpckit.proc on real processes: output, exit status, stdin, environment, a missing program, and a timeout that
kills the command (with its process group, where asked)."""

from __future__ import annotations

import os

import pytest

from hpckit import proc
from hpckit.errors import HpckitError
from hpckit.proc import CommandFailed, CommandNotFound, CommandResult, CommandTimedOut, LocalTransport


def test_a_command_s_output_status_and_stdin() -> None:
    done = proc.run(["sh", "-c", "cat; echo err >&2; exit 3"], stdin="in\n", where="here")
    assert done == CommandResult(("sh", "-c", "cat; echo err >&2; exit 3"), 3, "in\n", "err\n", "here")
    assert not done.ok and done.describe() == "`sh -c 'cat; echo err >&2; exit 3'` on here exited 3: err"


def test_without_stdin_a_command_reads_nothing() -> None:
    assert proc.run(["cat"], timeout=10).stdout == ""


def test_check_raises_hpckit_s_error_with_stderr() -> None:
    done = proc.run(["sh", "-c", "echo no such thing >&2; exit 1"])
    with pytest.raises(CommandFailed, match=r"^listing: no such thing$") as caught:
        done.check("listing")
    assert isinstance(caught.value, HpckitError) and caught.value.result is done
    assert proc.run(["true"]).check().ok


def test_a_missing_program_is_a_transport_error() -> None:
    with pytest.raises(CommandNotFound, match=r"^hpckit-no-such-program: command not found on box$"):
        proc.run(["hpckit-no-such-program"], where="box")


def test_past_its_timeout_the_command_is_killed() -> None:
    with pytest.raises(CommandTimedOut, match=r"^`sleep 4171` on localhost did not finish in 0\.5 s$"):
        proc.run(["sleep", "4171"], timeout=0.5)
    assert "sleep4171" not in _running()


def test_own_group_kills_what_the_command_started() -> None:
    """The sleep the shell starts would keep the pipes open (and the call waiting) if only the shell died."""
    with pytest.raises(CommandTimedOut):
        proc.run(["sh", "-c", "sleep 4172 & wait"], timeout=0.5, own_group=True)
    assert "sleep4172" not in _running()


def test_the_local_transport_adds_to_the_environment() -> None:
    done = LocalTransport().run(["sh", "-c", 'echo "$HPCKIT_PROC_TEST $HOME"'], env={"HPCKIT_PROC_TEST": "x"})
    assert done.stdout == f"x {os.environ['HOME']}\n" and done.where == "localhost"
    assert proc.run(["sh", "-c", 'echo "${HOME-unset}"'], env={}).stdout == "unset\n"


def _running() -> set[str]:
    """Every process's command line, its arguments run together."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                found.add(handle.read().replace(b"\0", b"").decode(errors="replace"))
        except OSError:
            continue  # ended meanwhile
    return found
