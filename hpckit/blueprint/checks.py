"""Rules that span several parts of a blueprint.

They read the raw (var-resolved) data rather than the validated model so that they still run, and
their problems are still reported, when some unrelated field failed validation.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

from hpckit.blueprint.accounts import accounts_problems
from hpckit.blueprint.blocks import topology_problems
from hpckit.blueprint.errors import Path_, Problem
from hpckit.blueprint.install import install_problems
from hpckit.blueprint.models import expand_hosts
from hpckit.blueprint.release import raw_slurm_release
from hpckit.blueprint.source import Located
from hpckit.slurm_releases import Version, key_problem, needs_problems, value_problems


def _items(data: Any, key: str) -> Iterator[tuple[int, dict[str, Any]]]:
    seq = data.get(key) if isinstance(data, dict) else None
    if isinstance(seq, list):
        for i, item in enumerate(seq):
            if isinstance(item, dict):
                yield i, item


def _hosts(expr: Any) -> list[str]:
    if not isinstance(expr, str):
        return []
    try:
        return expand_hosts(expr)
    except ValueError:
        return []  # reported by the model


def _addresses(value: Any) -> list[str] | None:
    if isinstance(value, list):
        return [str(v) for v in value]
    return _hosts(value) if isinstance(value, str) else None


class _Checker:
    def __init__(self, doc: Located, data: Any) -> None:
        self.doc = doc
        self.data = data if isinstance(data, dict) else {}
        self.problems: list[Problem] = []

    def add(self, path: Path_, message: str) -> None:
        self.problems.append(self.doc.problem(path, message))

    def run(self) -> list[Problem]:
        compute = self._partitions()
        self._service_hosts(compute)
        self._filesystems(compute)
        self._addresses_unique()
        self._slurm_conf()
        self._conf_needs()
        self._configless()
        self._auth()
        self._monitoring(compute)
        self._bench_toolchain()
        for path, message in install_problems(self.data, self.declared_hosts(compute)):
            self.add(path, message)
        for path, message in accounts_problems(self.data, self._gres()):
            self.add(path, message)
        return self.problems

    def _gres(self) -> frozenset[str]:
        """The GRES the cluster declares: gpu, when any partition's hardware has GPUs."""
        for _, part in _items(self.data, "partitions"):
            hardware = part.get("hardware")
            if isinstance(hardware, dict) and hardware.get("gpus"):
                return frozenset({"gpu"})
        return frozenset()

    def _partitions(self) -> dict[str, Path_]:
        """Each node declared (by a partition with `hardware:`) exactly once; every partition without
        `hardware:` made only of declared nodes. Returns the declared nodes and where."""
        seen: dict[str, Path_] = {}
        names: dict[str, int] = {}
        defaults = 0
        borrowers: list[tuple[Path_, list[str]]] = []
        for i, part in _items(self.data, "partitions"):
            path: Path_ = ("partitions", i)
            name = part.get("name")
            if isinstance(name, str):
                if name in names:
                    self.add((*path, "name"), f"partition {name!r} already declared at partitions[{names[name]}]")
                names.setdefault(name, i)
            defaults += part.get("default") is True
            hosts = _hosts(part.get("nodes"))
            if part.get("hardware") is None:
                borrowers.append((path, hosts))
                continue
            for host in hosts:
                if host in seen:
                    self.add((*path, "nodes"), f"node {host!r} is also in {_fmt(seen[host])}{_HINT}")
                else:
                    seen[host] = path
            addrs = _addresses(part.get("addresses"))
            if addrs is not None and hosts and len(addrs) != len(hosts):
                self.add((*path, "addresses"), f"{len(hosts)} nodes but {len(addrs)} addresses")
        for path, hosts in borrowers:
            missing = [h for h in hosts if h not in seen]
            if missing:
                self.add(
                    (*path, "nodes"),
                    f"{_few(missing)} not declared by any partition with hardware: (give this one hardware:, "
                    "or declare the nodes in another partition)",
                )
        if defaults > 1:
            self.add(("partitions",), f"{defaults} partitions are marked default; at most one may be")
        return seen

    def _service_hosts(self, compute: dict[str, Path_]) -> None:
        ctl = self.data.get("controller")
        if isinstance(ctl, dict) and isinstance(ctl.get("host"), str) and ctl["host"] in compute:
            host = ctl["host"]
            self.add(("controller", "host"), f"controller {host!r} is also a compute node in {_fmt(compute[host])}")

    def declared_hosts(self, compute: dict[str, Path_]) -> set[str]:
        hosts = set(compute)
        ctl = self.data.get("controller")
        if isinstance(ctl, dict) and isinstance(ctl.get("host"), str):
            hosts.add(ctl["host"])
        hosts.update(str(h.get("host")) for _, h in _items(self.data, "login"))
        return hosts

    def _monitoring(self, compute: dict[str, Path_]) -> None:
        """Prometheus runs on one of the blueprint's own hosts."""
        mon = self.data.get("monitoring")
        if not isinstance(mon, dict):
            return
        host = mon.get("host")
        if isinstance(host, str) and host not in self.declared_hosts(compute):
            self.add(("monitoring", "host"), f"{host!r} is not a declared host (controller, login or node)")

    def _bench_toolchain(self) -> None:
        """A shared virtualenv needs a shared filesystem to live on."""
        torch = (self.data.get("bench") or {}).get("torch") if isinstance(self.data.get("bench"), dict) else None
        if isinstance(torch, dict) and torch.get("location") == "shared" and not self.data.get("filesystems"):
            self.add(("bench", "torch", "location"), "shared needs a filesystem in `filesystems:`; use node")

    def _filesystems(self, compute: dict[str, Path_]) -> None:
        declared = self.declared_hosts(compute)
        mounts: dict[str, int] = {}
        for i, fs in _items(self.data, "filesystems"):
            server = fs.get("server")
            if fs.get("type") == "nfs" and isinstance(server, str) and server not in declared:
                self.add(("filesystems", i, "server"), f"server {server!r} is not a declared host")
            mount = fs.get("mount")
            if isinstance(mount, str):
                norm = mount.rstrip("/") or "/"
                if norm in mounts:
                    self.add(
                        ("filesystems", i, "mount"),
                        f"mount point {mount!r} is also used by filesystems[{mounts[norm]}]",
                    )
                mounts.setdefault(norm, i)

    def _addresses_unique(self) -> None:
        seen: dict[str, Path_] = {}
        lab_net = self._lab_subnet()
        for path, addr in self._all_addresses():
            if addr in seen:
                self.add(path, f"address {addr} is also used by {_fmt(seen[addr])}")
            seen.setdefault(addr, path)
            if lab_net is not None:
                self._in_lab(path, addr, lab_net)

    def _in_lab(self, path: Path_, addr: str, net: ipaddress.IPv4Network) -> None:
        try:
            ip = ipaddress.IPv4Address(addr)
        except ValueError:
            return
        if ip not in net:
            self.add(path, f"address {addr} is outside the lab subnet {net}")
        elif ip in (net.network_address, net.broadcast_address, net.network_address + 1):
            self.add(path, f"address {addr} is reserved in the lab subnet (network, broadcast or the host's)")

    def _lab_subnet(self) -> ipaddress.IPv4Network | None:
        prov = self.data.get("provider")
        defaults = {"lab": "10.77.0.0/24", "vm": "10.78.0.0/24"}  # the providers' default subnets
        kind = prov.get("type") if isinstance(prov, dict) else None
        if not isinstance(prov, dict) or not isinstance(kind, str) or kind not in defaults:
            return None  # an unknown or malformed provider is the model's to report
        try:
            return ipaddress.IPv4Network(str(prov.get("subnet", defaults[kind])))
        except ValueError:
            return None

    def _slurm_conf(self) -> None:
        """`slurm.conf:` overrides: keys the blueprint's Slurm reads (a typo gets the closest key, a removed
        or renamed one what to write instead), plugins that release has; then the topology switch."""
        slurm = self.data.get("slurm")
        release = raw_slurm_release(self.data)
        if not isinstance(slurm, dict) or release is None:
            return
        conf = slurm.get("conf")
        for key, value in conf.items() if isinstance(conf, dict) else ():
            self._conf_entry(str(key), value, release)
        for path, message in topology_problems(self.data, release):
            self.add(path, message)

    def _conf_needs(self) -> None:
        """Keys that would take no effect in the cluster's slurm.conf (the release table's `needs`): hpckit's
        own priority keys, written once accounts are declared, and the blueprint's overrides over them."""
        slurm, accounting = self.data.get("slurm"), self.data.get("accounting")
        conf = slurm.get("conf") if isinstance(slurm, dict) else None
        conf = conf if isinstance(conf, dict) else {}
        accounting = accounting if isinstance(accounting, dict) else {}
        declares = any(accounting.get(k) for k in ("qos", "accounts", "users"))
        own: dict[str, object] = {"PriorityType": "priority/multifactor"} if declares else {}
        if declares or isinstance(accounting.get("priority"), dict):  # its keys; the model checks the values
            own.update(dict.fromkeys(("PriorityWeightFairshare", "PriorityWeightQOS"), 1))
        effective = {**own, **{str(k): v for k, v in conf.items()}}
        for key, message in needs_problems(effective).items():
            if key in conf:
                self.add(("slurm", "conf", key), message)
            elif key in own:
                self.add(
                    ("accounting", "priority"), f"{message}: hpckit writes it once accounts, users or QOS are declared"
                )

    def _configless(self) -> None:
        """Configless mode with GPU nodes: slurmctld serves one gres.conf to every node, while hpckit writes a
        gres.conf per node (its own devices, NVML, sockets), so it has no file to serve yet."""
        slurm = self.data.get("slurm")
        if not isinstance(slurm, dict) or slurm.get("configless") is not True:
            return
        for i, part in _items(self.data, "partitions"):
            hardware = part.get("hardware")
            gpus = hardware.get("gpus") if isinstance(hardware, dict) else None
            if isinstance(gpus, dict) and str(gpus.get("count", 0)) not in ("0", ""):
                self.add(
                    ("partitions", i, "hardware", "gpus"),
                    "slurm.configless: true is for nodes without GPUs for now (slurmctld would serve one "
                    "gres.conf to all nodes, and hpckit writes gres.conf per node); drop configless or the GPUs",
                )

    def _auth(self) -> None:
        """`slurm.auth: slurm` needs a release with auth/slurm (23.11+); the keys it sets belong to it."""
        slurm = self.data.get("slurm")
        release = raw_slurm_release(self.data)
        if not isinstance(slurm, dict) or release is None:
            return
        auth = slurm.get("auth", "munge")
        if auth == "slurm":
            for problem in value_problems("AuthType", "auth/slurm", release):
                self.add(("slurm", "auth"), f"slurm.auth: slurm needs Slurm 23.11 or newer ({problem})")
        conf = slurm.get("conf")
        for key in conf if isinstance(conf, dict) else ():
            if str(key).lower() in ("authtype", "credtype"):
                message = (
                    f"{key} follows slurm.auth (munge or slurm), which also sets up the key on every host: "
                    "set slurm.auth instead"
                )
                self.problems.append(self.doc.problem(("slurm", "conf", key), message, key=True))

    def _conf_entry(self, key: str, value: Any, release: Version) -> None:
        path: Path_ = ("slurm", "conf", key)
        problem = key_problem(key, release)
        if problem is not None:
            self.problems.append(self.doc.problem(path, problem, key=True))
            return
        if isinstance(value, str):
            for message in value_problems(key, value, release):
                self.add(path, message)

    def _all_addresses(self) -> Iterator[tuple[Path_, str]]:
        ctl = self.data.get("controller")
        if isinstance(ctl, dict) and isinstance(ctl.get("address"), str):
            yield ("controller", "address"), ctl["address"]
        for i, login in _items(self.data, "login"):
            if isinstance(login.get("address"), str):
                yield ("login", i, "address"), login["address"]
        for i, part in _items(self.data, "partitions"):
            for addr in _addresses(part.get("addresses")) or []:
                yield ("partitions", i, "addresses"), addr


_HINT = "; to put a node in several partitions, leave hardware: out of the others"


def _few(hosts: list[str]) -> str:
    shown = ", ".join(repr(h) for h in hosts[:3])
    return f"node {shown} is" if len(hosts) == 1 else f"nodes {shown}{' ...' if len(hosts) > 3 else ''} are"


def _fmt(path: Path_) -> str:
    return f"{path[0]}[{path[1]}]" if len(path) == 2 else str(path)


def cross_checks(doc: Located, data: Any) -> list[Problem]:
    return _Checker(doc, data).run()
