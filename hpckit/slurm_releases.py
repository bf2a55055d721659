"""Per-release Slurm knowledge (hpckit/data/slurm-releases.yaml): versions, upgrade paths, slurm.conf keys.

One table that slurm.conf rendering, blueprint validation, `hpckit plan` and `hpckit upgrade` share, so
that what one of them knows of a release the others know too: for each slurm.conf key, the releases that
read it, what a change to it needs to take effect, and the plugins it accepts.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, total_ordering
from typing import Any, Literal, cast

import yaml

from hpckit.paths import DATA_DIR

RELEASES_FILE = DATA_DIR / "slurm-releases.yaml"
_VERSION_RE = re.compile(r"^(\d{2})\.(\d{2})(?:\.(\d+))?$")


class ReleaseError(ValueError):
    """A version hpckit cannot read, or an upgrade Slurm does not support."""


@total_ordering
@dataclass(frozen=True)
class Version:
    """A Slurm version: series (year.month) and, when given, the micro release."""

    major: int
    minor: int
    micro: int | None = None

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _VERSION_RE.match(text.strip())
        if match is None:
            raise ReleaseError(f"{text!r} is not a Slurm version (YY.MM or YY.MM.N, e.g. 24.11.5)")
        micro = match.group(3)
        return cls(int(match.group(1)), int(match.group(2)), int(micro) if micro is not None else None)

    @property
    def series(self) -> str:
        return f"{self.major:02d}.{self.minor:02d}"

    @property
    def series_version(self) -> Version:
        """This version's release series, without the micro release (24.11.5 -> 24.11)."""
        return Version(self.major, self.minor)

    def _key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.micro if self.micro is not None else -1)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __str__(self) -> str:
        return self.series if self.micro is None else f"{self.series}.{self.micro}"


@dataclass(frozen=True)
class Release:
    series: str
    upgrades_from: tuple[str, ...]
    supported: bool
    debian_packaging: bool


@cache
def _data() -> dict[str, Any]:
    return cast(dict[str, Any], yaml.safe_load(RELEASES_FILE.read_text(encoding="utf-8")))


@cache
def releases() -> dict[str, Release]:
    """Every release series hpckit knows, oldest first."""
    data = _data()
    return {
        series: Release(series, tuple(e["upgrades_from"]), bool(e["supported"]), bool(e["debian_packaging"]))
        for series, e in data["releases"].items()
    }


def release(version: str | Version) -> Release:
    """The release series of ``version``; ReleaseError naming the known ones when hpckit does not know it."""
    series = (version if isinstance(version, Version) else Version.parse(version)).series
    known = releases()
    if series not in known:
        raise ReleaseError(f"Slurm {series} is not a release hpckit knows (known: {', '.join(known)})")
    return known[series]


def upgrade_problem(current: str | Version, target: str | Version) -> str | None:
    """Why Slurm cannot go from ``current`` to ``target`` in one rolling upgrade; None when it can.

    A downgrade is refused; a jump over more releases than the target accepts names a path through
    releases each step of which Slurm supports.
    """
    cur = current if isinstance(current, Version) else Version.parse(current)
    tgt = target if isinstance(target, Version) else Version.parse(target)
    if tgt < cur:
        return f"{cur} -> {tgt} is a downgrade; Slurm's state and database cannot go back"
    if cur.series == tgt.series:
        return None
    target_release = release(tgt)
    if cur.series in target_release.upgrades_from:
        return None
    path = upgrade_path(cur.series, tgt.series)
    accepted = ", ".join(target_release.upgrades_from)
    via = f"; upgrade through {' -> '.join(path)}" if path else ""
    return f"Slurm {tgt.series} accepts upgrades from {accepted} only, not from {cur.series}{via}"


def upgrade_path(current: str, target: str) -> list[str]:
    """The shortest chain of release series from ``current`` to ``target`` (both included), each step
    supported; empty when there is none."""
    known = releases()
    frontier: list[list[str]] = [[current]]
    seen = {current}
    while frontier:
        next_frontier: list[list[str]] = []
        for chain in frontier:
            for series, rel in known.items():
                if series in seen or chain[-1] not in rel.upgrades_from:
                    continue
                if series == target:
                    return [*chain, series]
                seen.add(series)
                next_frontier.append([*chain, series])
        frontier = next_frontier
    return []


def version_text(value: object) -> str:
    """A `slurm.version` as YAML gave it, as text: an unquoted 24.11 reads as a float, and 25.10 would lose
    its 0, so a float is taken with its two decimals."""
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def buildable_from() -> Version:
    """The oldest release `install: build` takes: the first whose tarball carries SchedMD's debian/ folder."""
    return Version.parse(next(s for s, r in releases().items() if r.debian_packaging))


def build_features() -> dict[str, str]:
    """The optional parts of SchedMD's build a blueprint may ask for, each with what it brings."""
    return {str(k): str(v) for k, v in _data()["build_features"].items()}


def build_feature_needs() -> dict[str, list[str]]:
    """The features that need another one to build (restd: json)."""
    return {str(k): [str(n) for n in v] for k, v in (_data().get("build_feature_needs") or {}).items()}


def build_features_always() -> list[str]:
    """The features SchedMD's Debian packaging builds whatever the blueprint asks (slurmrestd and json)."""
    return [str(f) for f in _data().get("build_features_always") or []]


def supported_series() -> list[str]:
    """The release series SchedMD still ships fixes for, oldest first."""
    return [series for series, rel in releases().items() if rel.supported]


# --- slurm.conf keys ---------------------------------------------------------------------------------

Apply = Literal["reconfigure", "slurmd_restart", "slurmctld_restart", "unsupported"]
APPLY_ORDER: tuple[Apply, ...] = ("reconfigure", "slurmd_restart", "slurmctld_restart", "unsupported")
AsVersion = str | Version


def _version(value: AsVersion) -> Version:
    return value if isinstance(value, Version) else Version.parse(value)


def default_series(provider: str | None = None) -> Version:
    """The release a blueprint that names none runs: the distribution's package (Debian 12: 22.05), or that
    of the distribution a provider's machines run (``provider``: the blueprint's provider type)."""
    own = (_data().get("distro_by_provider") or {}).get(provider) if provider else None
    return Version.parse(str(own or _data()["distro_default"]))


@dataclass(frozen=True)
class Span:
    """The releases something exists in: from ``added`` (None: always) up to, not including, ``removed``."""

    added: Version | None = None
    removed: Version | None = None
    replaced_by: str | None = None
    removed_exactly: bool = True  # False: ``removed`` is the first release known without it, not its date

    def problem(self, what: str, version: Version) -> str | None:
        """Why ``what`` is not in Slurm ``version``; None when it is."""
        if self.added is not None and version.series_version < self.added:
            return f"{what} is new in Slurm {self.added}; this blueprint's Slurm is {version.series}"
        if self.removed is not None and version.series_version >= self.removed:
            use = f"; use {self.replaced_by}" if self.replaced_by else ""
            when = f"in Slurm {self.removed}" if self.removed_exactly else f"by Slurm {self.removed} at the latest"
            return f"{what} was removed {when}{use}"
        return None


@dataclass(frozen=True)
class ConfKey:
    """One slurm.conf key as the table knows it."""

    name: str
    span: Span
    renamed_to: str | None = None
    renamed_in: Version | None = None
    apply: tuple[tuple[Version, Apply], ...] = ((Version(0, 0), "reconfigure"),)
    plugins: Mapping[str, Span] = field(default_factory=dict)  # lower-cased plugin name -> span
    plugin_names: Mapping[str, str] = field(default_factory=dict)  # lower-cased -> as written
    plugin_list: bool = False
    needs: Mapping[str, str] = field(default_factory=dict)  # key -> value it takes effect only with
    why: str = ""

    def problem(self, version: AsVersion) -> str | None:
        """Why Slurm ``version`` does not read this key; None when it does."""
        ver = _version(version)
        if self.renamed_to and self.renamed_in is not None and ver.series_version >= self.renamed_in:
            return f"{self.name} was renamed {self.renamed_to} in Slurm {self.renamed_in}; write {self.renamed_to}"
        return self.span.problem(self.name, ver)

    def apply_in(self, version: AsVersion) -> Apply:
        return _class_in(self.apply, _version(version))


def _class_in(rules: tuple[tuple[Version, Apply], ...], version: Version) -> Apply:
    """The class of the latest rule at or before ``version`` (the earliest rule before any of them)."""
    current = rules[0][1]
    for since, cls in rules:
        if version.series_version >= since:
            current = cls
    return current


def _series(value: object) -> Version | None:
    return None if value is None else Version.parse(str(value))


def _rules(value: object) -> tuple[tuple[Version, Apply], ...]:
    if value is None:
        return ((Version(0, 0), "reconfigure"),)
    if isinstance(value, str):
        return ((Version(0, 0), _apply_class(value)),)
    items = cast(dict[str, str], value).items()
    return tuple(sorted(((Version.parse(s), _apply_class(c)) for s, c in items), key=lambda r: r[0]))


def _apply_class(value: str) -> Apply:
    if value not in APPLY_ORDER:
        raise ReleaseError(f"{RELEASES_FILE}: {value!r} is not one of {', '.join(APPLY_ORDER)}")
    return value


def _span(entry: Mapping[str, Any]) -> Span:
    exact = "removed_by" not in entry
    removed = _series(entry.get("removed") if exact else entry.get("removed_by"))
    return Span(_series(entry.get("added")), removed, entry.get("replaced_by"), exact)


def _conf_key(name: str, entry: Mapping[str, Any]) -> ConfKey:
    renamed = entry.get("renamed") or {}
    plugins = cast(dict[str, dict[str, Any]], entry.get("plugins") or {})
    return ConfKey(
        name=name,
        span=_span(entry),
        renamed_to=renamed.get("to"),
        renamed_in=_series(renamed.get("in")),
        apply=_rules(entry.get("apply")),
        plugins={p.lower(): _span(spec or {}) for p, spec in plugins.items()},
        plugin_names={p.lower(): p for p in plugins},
        plugin_list=bool(entry.get("list")),
        needs={str(k): str(v) for k, v in (entry.get("needs") or {}).items()},
        why=str(entry.get("why", "")),
    )


@cache
def conf_keys() -> dict[str, ConfKey]:
    """Every slurm.conf key hpckit knows, by lower-cased name (Slurm's keys ignore case)."""
    return {name.lower(): _conf_key(name, entry or {}) for name, entry in _data()["slurm_conf"].items()}


def conf_key(name: str) -> ConfKey | None:
    return conf_keys().get(name.lower())


def key_problem(name: str, version: AsVersion) -> str | None:
    """Why slurm.conf key ``name`` is wrong for Slurm ``version`` (unknown, not yet there, removed or
    renamed); None when Slurm ``version`` reads it."""
    key = conf_key(name)
    if key is None:
        names = [k.name for k in conf_keys().values() if k.problem(version) is None]
        close = difflib.get_close_matches(name.lower(), [n.lower() for n in names], n=1, cutoff=0.75)
        hint = f"; did you mean {next(n for n in names if n.lower() == close[0])!r}?" if close else ""
        return f"{name!r} is not a slurm.conf key{hint}"
    return key.problem(version)


def value_problems(name: str, value: str, version: AsVersion) -> list[str]:
    """What is wrong with the plugin(s) named by ``value`` for plugin-typed key ``name`` in ``version``."""
    key = conf_key(name)
    if key is None or not key.plugins:
        return []
    tokens = [t.strip() for t in value.split(",")] if key.plugin_list else [value.strip()]
    return [p for p in (_plugin_problem(key, t, _version(version)) for t in tokens if t) if p]


def _plugin_problem(key: ConfKey, token: str, version: Version) -> str | None:
    kind, slash, _ = next(iter(key.plugin_names.values())).partition("/")
    if not slash:  # a key whose plugins go by bare names (MpiDefault=pmix); a type/ prefix is tolerated
        full = token.rpartition("/")[2]
    else:
        full = token if "/" in token or not key.plugin_list else f"{kind}/{token}"
    span = key.plugins.get(full.lower())
    if span is not None:
        return span.problem(f"{key.name}={key.plugin_names[full.lower()]}", version)
    names = [key.plugin_names[p] for p, s in key.plugins.items() if s.problem("", version) is None]
    close = difflib.get_close_matches(full.lower(), [n.lower() for n in names], n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{key.name}: {token!r} is not a plugin of Slurm {version.series} ({hint}known: {', '.join(names)})"


def needs_problems(conf: Mapping[str, object]) -> dict[str, str]:
    """The keys of a slurm.conf (key -> value, any case) that take no effect in it, each with why: the table's
    `needs` names a setting the conf does not have."""
    values = {k.lower(): str(v).lower() for k, v in conf.items()}
    out = {}
    for name in conf:
        key = conf_key(name)
        if key is None:
            continue
        for need, value in key.needs.items():
            have = values.get(need.lower())
            if have != value.lower():
                out[name] = (
                    f"{key.name} takes effect only with {need}={value} ({key.why.split(':')[0]}); "
                    f"this cluster's slurm.conf has {f'{need}={have}' if have else f'no {need}'}"
                )
    return out


def apply_for(name: str, version: AsVersion) -> Apply:
    """What a change of slurm.conf key ``name`` needs to take effect in Slurm ``version``. A key the table
    does not know gets a slurmctld restart: nothing says less is enough."""
    key = conf_key(name)
    return key.apply_in(version) if key is not None else "slurmctld_restart"


def restart_keys(version: AsVersion) -> list[str]:
    """The slurm.conf keys (as Slurm spells them) whose change needs a daemon restart in Slurm ``version``:
    the list the Ansible roles restart for (they apply any other change with `scontrol reconfigure`)."""
    wanted = ("slurmd_restart", "slurmctld_restart")
    return [k.name for k in conf_keys().values() if k.problem(version) is None and k.apply_in(version) in wanted]


def unread_keys(version: AsVersion) -> list[str]:
    """The slurm.conf keys (lower-cased) that Slurm ``version`` does not read: never rendered for it."""
    return [name for name, key in conf_keys().items() if key.problem(version) is not None]


@dataclass(frozen=True)
class ConfForRelease:
    settings: dict[str, str]  # what Slurm ``version`` reads, renamed keys under their new name
    dropped: dict[str, str]  # key -> why it was left out


def conf_for_release(settings: Mapping[str, str], version: AsVersion) -> ConfForRelease:
    """``settings`` (slurm.conf KEY: value) as Slurm ``version`` reads them: a key the release renamed is
    written under its new name, one it removed or does not have yet is left out, with the reason. A key
    the table does not know is kept: validation refuses those in a blueprint, and whatever else hpckit
    writes must not vanish because the table lags a release."""
    kept: dict[str, str] = {}
    dropped: dict[str, str] = {}
    for name, value in settings.items():
        key = conf_key(name)
        if key is None:
            kept[name] = value
            continue
        if key.renamed_to and key.problem(version) is not None:
            target = conf_key(key.renamed_to)
            if target is not None and target.problem(version) is None:
                kept[target.name] = _renamed_plugins(key, target, value)
                continue
        problem = key.problem(version)
        if problem is None:
            kept[name] = value
        else:
            dropped[name] = problem
    return ConfForRelease(kept, dropped)


def _renamed_plugins(old: ConfKey, new: ConfKey, value: str) -> str:
    """A value of a renamed plugin key in the new key's plugin family (job_container/tmpfs ->
    namespace/tmpfs) where the new key has that plugin; anything else is kept as written."""
    if not old.plugin_names or not new.plugin_names:
        return value
    old_kind = next(iter(old.plugin_names.values())).split("/", 1)[0]
    new_kind = next(iter(new.plugin_names.values())).split("/", 1)[0]
    out = []
    for token in value.split(","):
        kind, _, plugin = token.strip().partition("/")
        moved = f"{new_kind}/{plugin}"
        out.append(moved if kind.lower() == old_kind and moved.lower() in new.plugins else token.strip())
    return ",".join(out)


def topology_key_problem(name: str, version: AsVersion) -> str | None:
    """Why topology.conf key ``name`` is not in Slurm ``version``; None when it is."""
    entry = _data()["topology_conf"].get(name)
    if entry is None:
        return f"{name!r} is not a topology.conf key"
    return _span(entry).problem(f"topology.conf {name}", _version(version))


def topology_small_blocks(version: AsVersion) -> bool:
    """Whether Slurm ``version`` takes a topology/block block smaller than the base block size."""
    return _version(version).series_version >= Version.parse(str(_data()["topology_small_blocks_from"]))
