"""What a deploy with ``install: build`` installed, for the deployment record: the build's manifest (written by
the slurm_build role on the build host), and how slurmd finds GPUs with it."""

from __future__ import annotations

import base64
import json
from typing import Any

from hpckit.errors import HpckitError
from hpckit.proc import Transport

__all__ = ["install_record"]

# Each manifest of the version's builds as two lines: its path, and its bytes in base64.
_CAT_MANIFESTS = (
    'for f in "$1"/packages/"$2"_*/manifest.json; do if [ -r "$f" ]; then printf "%s\\n" "$f"; base64 -w0 "$f"; '
    "echo; fi; done"
)


def install_record(extravars: dict[str, Any], conn: Transport | None) -> dict[str, Any]:
    """``{"mode": "distro"}``, or the build's version, features, packages, folder and GPU detection, read
    from its manifest on the build host (``conn``); a manifest that cannot be read is said so, not guessed."""
    if extravars.get("slurm_install") != "build":
        return {"mode": "distro"}
    out: dict[str, Any] = {"mode": "build", "version": extravars["slurm_build_version"]}
    manifest = _manifest(extravars, conn) if conn is not None else None
    if manifest is None:
        return {**out, "manifest": "not found on the build host"}
    nvml = bool(manifest.get("nvml"))
    return {
        **out,
        "build_host": extravars["slurm_build_host"],
        "build_dir": manifest["dir"],
        "features": manifest.get("features", []),
        "system": manifest.get("system", ""),
        "packages": manifest.get("packages", []),
        "nvml": nvml,
        # Without the NVML plugin (no NVIDIA headers on the build host) Slurm 24.11+ finds GPUs through
        # AutoDetect=nvidia.
        "gpu_detection": "AutoDetect=nvml" if nvml else "AutoDetect=nvidia",
    }


def _manifest(extravars: dict[str, Any], conn: Transport) -> dict[str, Any] | None:
    cache = str(extravars.get("slurm_build_cache_dir", "/var/cache/hpckit"))
    version, features = extravars["slurm_build_version"], sorted(set(extravars["slurm_build_features"]))
    try:
        done = conn.run(["sh", "-c", _CAT_MANIFESTS, "sh", cache, version], timeout=15)
    except HpckitError:
        return None
    lines = done.stdout.splitlines() if done.ok else []
    for path, data in zip(lines[::2], lines[1::2], strict=False):
        try:
            manifest = json.loads(base64.b64decode(data))
        except ValueError:
            continue
        if isinstance(manifest, dict) and manifest.get("features") == features:
            return {**manifest, "dir": path.rsplit("/", 1)[0]}
    return None
