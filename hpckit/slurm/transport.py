"""Where Slurm commands run: on this machine, or on the cluster's login node over SSH (fabric).

Every other module asks a Transport; none calls subprocess or SSH for Slurm itself.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hpckit.errors import HpckitError


class TransportError(HpckitError):
    """The command could not be run at all (host unreachable, binary missing), as opposed to failing."""


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    where: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def describe(self) -> str:
        err = self.stderr.strip() or self.stdout.strip()
        return f"`{shlex.join(self.argv)}` on {self.where} exited {self.rc}" + (f": {err}" if err else "")


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
        full_env = None
        if env:
            import os

            full_env = {**os.environ, **env}
        try:
            done = subprocess.run(
                list(argv), input=stdin, capture_output=True, text=True, timeout=timeout, env=full_env, check=False
            )
        except FileNotFoundError:
            raise TransportError(f"{argv[0]}: command not found on {self.where}") from None
        except subprocess.TimeoutExpired:
            raise TransportError(f"`{shlex.join(argv)}` on {self.where} did not finish in {timeout} s") from None
        return CommandResult(tuple(argv), done.returncode, done.stdout, done.stderr, self.where)

    def close(self) -> None:
        """Nothing to close: each command is its own process."""


@dataclass
class SshTransport:
    """Runs commands on `host` as `user` with fabric; one connection reused for every command."""

    host: str
    user: str = "root"
    port: int = 22
    key_file: Path | None = None
    known_hosts: Path | None = None
    connect_timeout: float = 10.0
    where: str = ""
    _conn: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.where = self.where or self.host

    def _connection(self) -> Any:
        if self._conn is None:
            import fabric
            import paramiko

            connect: dict[str, Any] = {"timeout": self.connect_timeout, "allow_agent": self.key_file is None}
            if self.key_file is not None:
                connect["key_filename"] = str(self.key_file)
                connect["look_for_keys"] = False
            conn = fabric.Connection(self.host, user=self.user, port=self.port, connect_kwargs=connect)
            client = conn.client
            if self.known_hosts is not None:
                client.load_host_keys(str(self.known_hosts))
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
            self._conn = conn
        return self._conn

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        import io

        import invoke
        import paramiko

        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        command = f"{prefix} {shlex.join(argv)}".strip()
        try:
            result = self._connection().run(
                command,
                hide=True,
                warn=True,
                timeout=timeout,
                in_stream=io.StringIO(stdin) if stdin is not None else False,
            )
        except invoke.exceptions.CommandTimedOut:
            raise TransportError(f"`{command}` on {self.where} did not finish in {timeout} s") from None
        except (paramiko.SSHException, OSError) as exc:
            self.close()
            raise TransportError(f"cannot reach {self.where} over SSH: {exc}") from None
        return CommandResult(tuple(argv), int(result.exited), str(result.stdout), str(result.stderr), self.where)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
