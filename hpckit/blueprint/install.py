"""How Slurm gets onto the hosts (`slurm.install`: distro, build or packages) and the rules between its keys:
each key goes with its own way of installing, a build takes only a release whose tarball carries SchedMD's
Debian packaging (23.11 on), names an exact release, a source hpckit can read, a declared build host and
features that build together.

They read the raw (var-resolved) data, as the other cross checks do, and name the key each problem is at.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpckit.blueprint.errors import Path_
from hpckit.blueprint.models import install_mode
from hpckit.slurm_releases import (
    ReleaseError,
    Version,
    build_feature_needs,
    build_features,
    build_features_always,
    buildable_from,
    default_series,
    release,
    supported_series,
    version_text,
)

__all__ = ["install_problems"]

Problems = Iterator[tuple[Path_, str]]
URL_RE = re.compile(r"^https?://[^\s/]+/\S*$")
# SchedMD's own name (slurm-24.11.5.tar.bz2) and Debian's for the same file (slurm-wlm_24.11.5.orig.tar.gz).
_TARBALL_VERSION = re.compile(r"(?:^|/)slurm(?:-wlm_|-)(\d+\.\d+\.\d+)[^/]*$")
# Which way of installing each key belongs to.
_KEY_MODE = {"source": "build", "source_sha256": "build", "build": "build", "packages": "packages"}


def install_problems(data: Any, declared_hosts: set[str]) -> list[tuple[Path_, str]]:
    """Every problem of the raw blueprint's `slurm.install` and the keys that go with it."""
    slurm = data.get("slurm") if isinstance(data, dict) else None
    if not isinstance(slurm, dict):
        return []
    raw_version = slurm.get("version")
    try:
        version = None if raw_version is None else Version.parse(version_text(raw_version))
        if version is not None:
            release(version)
    except ReleaseError:
        return []  # the model reports the version
    install = slurm.get("install")
    if install not in (None, "distro", "build", "packages"):
        return []  # the model reports it
    mode = install_mode(install, None if version is None else str(version))
    where: Path_ = ("slurm", "install") if install is not None else ("slurm", "version")
    found = list(_misplaced(slurm, mode))
    if mode == "distro":
        found += _distro(version)
    elif mode == "build":
        found += _build(slurm, version, where, declared_hosts)
    elif not slurm.get("packages"):
        found.append((where, "install: packages needs slurm.packages: the site's Slurm .debs or its apt source line"))
    return found


def _given(key: str, value: Any) -> bool:
    """Whether the blueprint says something with ``key``: an expanded blueprint (the record's, `hpckit
    expand`'s) holds every key with its default, which says nothing."""
    if key == "build" and isinstance(value, dict):
        default = list(build_features())
        return value.get("host") is not None or value.get("features", default) != default
    return value not in (None, [])


def _misplaced(slurm: dict[str, Any], mode: str) -> Problems:
    for key, belongs in _KEY_MODE.items():
        if _given(key, slurm.get(key)) and belongs != mode:
            yield ("slurm", key), f"{key} goes with install: {belongs}; this blueprint installs Slurm by {mode}"
    if slurm.get("source_sha256") is not None and slurm.get("source") is None:
        yield ("slurm", "source_sha256"), "source_sha256 goes with source (the tarball it is the hash of)"


def _distro(version: Version | None) -> Problems:
    distro = default_series()
    if version is not None and version.series != distro.series:
        yield (
            ("slurm", "version"),
            f"the distribution's Slurm is {distro.series}, not {version}: use install: build to build "
            f"{version} from SchedMD's source, or install: packages for the site's own",
        )


def _build(slurm: dict[str, Any], version: Version | None, where: Path_, declared: set[str]) -> Problems:
    if version is None:
        yield where, 'install: build needs slurm.version, the release to build (e.g. "24.11.5")'
        return
    oldest = buildable_from()
    if version.series_version < oldest:
        yield (
            ("slurm", "version"),
            f"Slurm {version.series} cannot be built by hpckit: a build uses SchedMD's own Debian packaging, which "
            f"its tarballs carry from {oldest} on; build a release from {oldest} (SchedMD supports "
            f"{', '.join(supported_series())}), or use install: distro for the distribution's {default_series()}",
        )
    elif version.micro is None:
        yield ("slurm", "version"), f"a build needs the exact release ({version}.N), not the series {version}"
    yield from _source(slurm.get("source"), version)
    build = slurm.get("build")
    if isinstance(build, dict):
        yield from _build_settings(build, declared)


def _source(source: Any, version: Version) -> Problems:
    if not isinstance(source, str):
        return
    path: Path_ = ("slurm", "source")
    named = _TARBALL_VERSION.search(source)
    if named is not None and version.micro is not None and named.group(1) != str(version):
        yield path, f"{source} is Slurm {named.group(1)}, but slurm.version is {version}"
    if URL_RE.match(source):
        return
    if "://" in source:
        yield path, f"{source!r} is not a URL hpckit fetches (http or https) nor a local path"
    elif not os.path.isabs(source):
        yield path, f"{source!r}: a local source must be an absolute path (or an http or https URL)"
    elif not Path(source).is_file() or not os.access(source, os.R_OK):
        yield path, f"cannot read {source} on this machine (not a readable file)"


def _build_settings(build: dict[str, Any], declared: set[str]) -> Problems:
    host = build.get("host")
    if isinstance(host, str) and declared and host not in declared:
        yield ("slurm", "build", "host"), f"build host {host!r} is not a declared host (controller, login or node)"
    features = build.get("features")
    if not isinstance(features, list):
        return
    always = [f for f in build_features_always() if f not in features]
    if always:
        yield (
            ("slurm", "build", "features"),
            f"SchedMD's Debian packaging always builds {', '.join(build_features_always())} (slurmrestd has a "
            f"package of its own): add {', '.join(always)}",
        )
    for i, feature in enumerate(features):
        missing = [n for n in build_feature_needs().get(str(feature), []) if n not in features]
        if missing:
            yield ("slurm", "build", "features", i), f"{feature} does not build without {', '.join(missing)}"
