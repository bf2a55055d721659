"""Files on the cluster's shared filesystem, read and written through the login node's Transport.

The bench keeps its history and stages its program there, and the Transport may be SSH, which carries
text: bytes travel base64-encoded, written in pieces small enough for one command-line argument
(fabric feeds a command's stdin a byte per poll, far too slow for files).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from hpckit.errors import HpckitError
from hpckit.proc import Transport

# Linux caps one argument at 128 KiB (MAX_ARG_STRLEN); stay well under it.
CHUNK_CHARS = 96_000

_WRITE = 'mkdir -p -- "$(dirname -- "$1")" && printf %s "$3" | base64 -d > "$1.$2.part"'
_APPEND = 'printf %s "$3" | base64 -d >> "$1.$2.part"'
_COMMIT = 'mv -f -- "$1.$2.part" "$1"'
_LIST = 'cd -- "$1" 2>/dev/null || exit 0; for f in *; do [ -f "$f" ] && printf "%s\\n" "$f"; done; exit 0'


class ClusterFileError(HpckitError):
    pass


@dataclass
class ClusterFiles:
    transport: Transport

    def read(self, path: str) -> bytes | None:
        """The file's bytes; None when it does not exist."""
        done = self.transport.run(["sh", "-c", '[ -e "$1" ] || exit 3; base64 -- "$1"', "hpckit-read", path])
        if done.rc == 3:
            return None
        if not done.ok:
            raise ClusterFileError(f"cannot read {path} on {self.transport.where}: {done.describe()}")
        try:
            return base64.b64decode("".join(done.stdout.split()), validate=True)
        except binascii.Error as exc:
            raise ClusterFileError(f"{path} on {self.transport.where} came back garbled: {exc}") from None

    def write(self, path: str, data: bytes) -> None:
        """Write atomically: readers see the old file or the whole new one, never a part."""
        text = base64.b64encode(data).decode()
        tag = hashlib.sha256(data).hexdigest()[:12]
        pieces = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)] or [""]
        for n, piece in enumerate(pieces):
            self._sh(_WRITE if n == 0 else _APPEND, path, tag, piece)
        self._sh(_COMMIT, path, tag, "")

    def exists(self, path: str) -> bool:
        return self.transport.run(["test", "-e", path]).ok

    def listdir(self, path: str) -> list[str]:
        """Names of the plain files in a directory; [] when it does not exist."""
        done = self.transport.run(["sh", "-c", _LIST, "hpckit-ls", path])
        if not done.ok:
            raise ClusterFileError(f"cannot list {path} on {self.transport.where}: {done.describe()}")
        return sorted(line for line in done.stdout.splitlines() if line)

    def _sh(self, script: str, path: str, tag: str, piece: str) -> None:
        done = self.transport.run(["sh", "-c", script, "hpckit-write", path, tag, piece])
        if not done.ok:
            raise ClusterFileError(f"cannot write {path} on {self.transport.where}: {done.describe()}")
