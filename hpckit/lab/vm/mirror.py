"""The Debian archive to build VM images from: the one this machine's own apt already uses.

hpckit names no archive host itself; it reads apt's sources (sources.list one-line entries and deb822
``.sources`` files in sources.list.d) and takes the archive whose suites include this machine's own
release: that one carries every Debian release, the one the images are built from included.
"""

from __future__ import annotations

from pathlib import Path

from hpckit.lab.errors import LabError

APT_ETC = Path("/etc/apt")
OS_RELEASE = Path("/etc/os-release")
_SCHEMES = ("http://", "https://", "file:/")


def debian_mirror(apt_etc: Path = APT_ETC, os_release: Path = OS_RELEASE) -> str:
    """The first enabled archive URI, in apt's order, that serves this machine's release."""
    codename = host_codename(os_release)
    files = _source_files(apt_etc)
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        entries = _deb822_entries(text) if path.suffix == ".sources" else _one_line_entries(text)
        for uris, suites in entries:
            if codename in suites:
                for uri in uris:
                    if uri.startswith(_SCHEMES):
                        return uri.rstrip("/")
    read = ", ".join(str(p) for p in files) or f"nothing under {apt_etc}"
    raise LabError(f"no Debian archive for this machine's release {codename!r} in apt's sources ({read})")


def host_codename(os_release: Path = OS_RELEASE) -> str:
    """This machine's Debian release name (VERSION_CODENAME: bookworm, trixie)."""
    try:
        lines = os_release.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise LabError(f"cannot read {os_release}: {exc.strerror}") from None
    for line in lines:
        key, _, value = line.partition("=")
        if key == "VERSION_CODENAME" and value.strip('"'):
            return value.strip('"')
    raise LabError(f"{os_release} names no VERSION_CODENAME: the VM images need a Debian host")


def _source_files(apt_etc: Path) -> list[Path]:
    """apt's order: sources.list, then sources.list.d's .list and .sources files by name."""
    files = [apt_etc / "sources.list"] if (apt_etc / "sources.list").is_file() else []
    parts = apt_etc / "sources.list.d"
    if parts.is_dir():
        files += sorted(p for p in parts.iterdir() if p.is_file() and p.suffix in (".list", ".sources"))
    return files


def _one_line_entries(text: str) -> list[tuple[list[str], list[str]]]:
    """`deb [options] URI SUITE COMPONENT...` lines: ([URI], [SUITE])."""
    entries = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("deb ") or line.startswith("deb\t"):
            words = line.split()[1:]
            if words and words[0].startswith("["):
                while words and not words[0].endswith("]"):
                    words.pop(0)
                words = words[1:]
            if len(words) >= 2:
                entries.append(([words[0]], [words[1]]))
    return entries


def _deb822_entries(text: str) -> list[tuple[list[str], list[str]]]:
    """Enabled `Types: deb` stanzas: (URIs, Suites)."""
    entries = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for raw in stanza.splitlines():
            if raw.startswith("#") or not raw.strip():
                continue
            if raw[0] in " \t" and key:  # a continuation line
                fields[key] += " " + raw.strip()
                continue
            key, _, value = raw.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes").lower() != "no":
            entries.append((fields.get("uris", "").split(), fields.get("suites", "").split()))
    return entries
