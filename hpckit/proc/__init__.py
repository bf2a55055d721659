"""Where hpckit runs programs: the one result type, the one Transport interface, and the local transport.

The only module that starts processes (it alone imports subprocess): Slurm commands, the health probe's
tools, the lab's `ip`, `tc` and nsenter command lines all come through here, so that a timeout, a missing
program and a failure read the same everywhere. SSH runs on hpckit.proc.ssh; the lab's nodes
(nsenter) on hpckit.lab.node.NodeTransport.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess  # here alone: every program hpckit starts goes through this module
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Protocol, TypeAlias

from hpckit.errors import HpckitError

# A program started with spawn() and left running (a lab node's launcher).
Process: TypeAlias = "subprocess.Popen[bytes]"


class TransportError(HpckitError):
    """The command could not be run at all (host unreachable, binary missing), as opposed to failing."""


class CommandNotFound(TransportError):
    """The program is not installed where the command was to run."""


class CommandTimedOut(TransportError):
    """The command ran past its timeout and was killed."""


class CommandFailed(HpckitError):
    """The command ran and exited non-zero (CommandResult.check)."""

    def __init__(self, result: CommandResult, message: str) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    where: str = "localhost"
    missing: bool = False  # the program is not installed there (only results that stand for one say so)
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.missing and not self.timed_out

    def describe(self) -> str:
        err = self.stderr.strip() or self.stdout.strip()
        return f"`{shlex.join(self.argv)}` on {self.where} exited {self.rc}" + (f": {err}" if err else "")

    def check(self, what: str | None = None) -> CommandResult:
        """This result when the command succeeded; CommandFailed carrying its stderr otherwise."""
        if self.ok:
            return self
        message = f"{what}: {self.stderr.strip()}" if what is not None else self.describe()
        raise CommandFailed(self, message)


class Transport(Protocol):
    where: str

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult: ...

    def close(self) -> None: ...


def run(
    argv: Sequence[str],
    *,
    stdin: str | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    where: str = "localhost",
    own_group: bool = False,
) -> CommandResult:
    """Run a program on this machine and capture its output as text.

    `env` replaces the environment (None: this process's). CommandNotFound when the program is missing;
    CommandTimedOut past `timeout`, once the program is killed: with `own_group`, it runs in a process
    group of its own and the whole group is killed, so that what it started (inside a lab node) dies too.
    """
    args = tuple(argv)
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env) if env is not None else None,
            start_new_session=own_group,
        )
    except FileNotFoundError:
        raise CommandNotFound(f"{args[0]}: command not found on {where}") from None
    with proc:
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc, own_group)
            raise CommandTimedOut(f"`{shlex.join(args)}` on {where} did not finish in {timeout} s") from None
    return CommandResult(args, proc.returncode, out, err, where)


def _kill(proc: subprocess.Popen[str], own_group: bool) -> None:
    if own_group:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()  # its group is gone: the pipes end
    else:
        proc.kill()
        proc.wait()


def spawn(argv: Sequence[str], *, stderr: IO[bytes], env: Mapping[str, str] | None = None) -> Process:
    """Start a program that keeps running: stdin from /dev/null, stdout a pipe for the caller to read,
    in a session of its own (a Ctrl-C aimed at hpckit must not reach it)."""
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    )


def interactive(argv: Sequence[str]) -> int:
    """Run a program on this terminal (its stdin, stdout and stderr are ours); its exit status."""
    return subprocess.run(list(argv), check=False).returncode


@dataclass
class LocalTransport:
    where: str = "localhost"

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        full_env = {**os.environ, **env} if env else None
        return run(argv, stdin=stdin, timeout=timeout, env=full_env, where=self.where)

    def close(self) -> None:
        """Nothing to close: each command is its own process."""
