"""Every config the roles write, rendered offline from the inventory and extravars a deploy would use.

The templates are the roles' own (ansible/roles/*/templates), rendered with Ansible's options (trim_blocks,
the file's last newline kept) and its filters and tests, fed what Ansible would give them: role defaults
(those of the roles a role depends on first) < group vars < host vars < role vars < the facts the role's
own tasks set before writing < extravars. So what `hpckit expand` shows cannot drift from what a deploy
writes. Nothing is contacted: what only a run can learn is assumed, and each assumption is listed in
`CONFIGS` beside the file it shapes.

Hosts that get the same variables get the same files, so files are rendered once per host class: the
cluster (files every Slurm host holds the same, e.g. slurm.conf), the controller, each login host, and the
nodes of each partition that declares hardware (named by their hostlist in the file headers).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from typing import Any

import jinja2
import jinja2.lexer
import yaml
from jinja2.nativetypes import NativeEnvironment

from hpckit.hw.fabric import topology_module
from hpckit.paths import ansible_dir
from hpckit.slurm.conf import collect_names

# What deploy puts in slurmdbd.conf from the machine that deploys: never rendered here.
SECRET = "<secret: written by deploy, never shown>"


@dataclass(frozen=True)
class Config:
    """One file a role writes: its template, where it lands, on which hosts and under which assumptions."""

    role: str
    template: str
    dest: str  # Jinja text, rendered in the host's variables
    scope: str  # cluster | controller | login | dbd | compute
    when: str = "true"  # Jinja expression in the host's variables, as the role's task checks it
    facts: Mapping[str, Any] = field(default_factory=dict)  # what the role learns at run time, assumed
    assumes: str = ""
    braces: bool = False  # the file's own syntax has {{ }} (Prometheus' alert templates): not left unresolved


CONFIGS: tuple[Config, ...] = (
    Config(
        "slurm_common",
        "slurm.conf.j2",
        "{{ slurm_conf_dir }}/slurm.conf",
        "cluster",
        assumes="TopologyPlugin only when a fabric dump was given (the infiniband role reads the fabric)",
    ),
    Config(
        "slurm_compute", "cgroup.conf.j2", "{{ slurm_conf_dir }}/cgroup.conf", "compute", when="not slurm_configless"
    ),
    # Configless: slurmctld serves it to the nodes (site.yml writes it with slurm_compute's served tasks).
    Config(
        "slurm_compute", "cgroup.conf.j2", "{{ slurm_conf_dir }}/cgroup.conf", "controller", when="slurm_configless"
    ),
    Config(
        "slurm_compute", "gres.conf.j2", "{{ slurm_conf_dir }}/gres.conf", "compute", when="slurm_compute_writes_gres"
    ),
    Config(
        "nvidia",
        "gres.conf.j2",
        "{{ nvidia_gres_path }}",
        "compute",
        when="nvidia_gpu_count | int > 0",
        facts={"nvidia_state": {"reads": {}, "paths": {}}},
        assumes="File= lines; a Slurm built with NVML gets AutoDetect=nvml instead (nvidia_gres_autodetect)",
    ),
    Config(
        "infiniband",
        "nccl.conf.j2",
        "{{ infiniband_nccl_conf }}",
        "compute",
        when="infiniband_hcas | length > 0",
        facts={"infiniband_nccl_socket_ifname": ""},
        assumes="NCCL_SOCKET_IFNAME is the interface of the node's address, found on the node",
    ),
    Config("enroot_pyxis", "enroot.conf.j2", "/etc/enroot/enroot.conf", "compute", when="enroot_pyxis_enroot"),
    Config(
        "enroot_pyxis",
        "tmpfiles.conf.j2",
        "/etc/tmpfiles.d/enroot.conf",
        "compute",
        when="enroot_pyxis_enroot and enroot_pyxis_base_dirs | select('match', '^/run/') | list | length > 0",
    ),
    *(
        Config("enroot_pyxis", template, dest, scope, when="enroot_pyxis_pyxis")
        for template, dest in (
            ("plugstack.conf.j2", "{{ enroot_pyxis_slurm_conf_dir }}/plugstack.conf"),
            ("pyxis.conf.j2", "{{ enroot_pyxis_slurm_conf_dir }}/plugstack.conf.d/pyxis.conf"),
        )
        for scope in ("compute", "login")
    ),
    *(
        Config("shared_fs", "exports.j2", "{{ shared_fs_exports_file }}", scope, when="shared_fs_served | length > 0")
        for scope in ("controller", "login")
    ),
    Config(
        "slurm_accounting",
        "slurmdbd.conf.j2",
        "{{ slurm_conf_dir }}/slurmdbd.conf",
        "dbd",
        facts={"slurm_accounting_db_password": SECRET},
        assumes="StoragePass is the database password deploy keeps on the controller",
    ),
    Config("slurm_accounting", "mariadb.cnf.j2", "{{ slurm_accounting_mariadb_conf }}", "dbd"),
    *(
        Config("hpckit_health", "health.json.j2", "{{ hpckit_health_config_dir }}/health.json", scope)
        for scope in ("compute", "login")
    ),
    *(
        Config(
            "monitoring",
            template,
            dest,
            "controller",
            when="monitoring_enabled | bool and monitoring_host == inventory_hostname",
            assumes="Prometheus on the controller (a monitoring.host elsewhere gets the same files)",
            braces=template == "hpckit-rules.yml.j2",
        )
        for template, dest in (
            ("prometheus.yml.j2", "/etc/prometheus/prometheus.yml"),
            ("hpckit-rules.yml.j2", "{{ monitoring_rules_file }}"),
            ("alertmanager.yml.j2", "/etc/prometheus/alertmanager.yml"),
        )
    ),
)


@dataclass(frozen=True)
class HostClass:
    """Hosts that get the same files: a name for file headers and output folders, and the hosts."""

    label: str  # inventory_hostname in the templates, and the hostlist of the hosts: collect_hostlist(hosts)
    folder: str
    hosts: tuple[str, ...]
    scope: str  # cluster | controller | login | compute


@dataclass(frozen=True)
class Rendered:
    path: str  # relative to the output folder
    dest: str  # where the role writes it
    hosts: str  # hostlist of the hosts that get it
    role: str
    template: str
    text: str
    assumes: str


# --- Ansible's view of one host -------------------------------------------------------------------------------


def _filters() -> dict[str, Any]:
    from ansible.plugins.filter.core import FilterModule as Core
    from ansible.plugins.filter.mathstuff import FilterModule as Math

    return {**Core().filters(), **Math().filters()}


class _YamlLexer(jinja2.lexer.Lexer):
    r"""Ansible's reading of a template that comes from YAML (a role variable, a task argument): inside
    {{ }}, a string literal keeps its backslashes as written ('\s' is the regex's \s, '\2' a group), where
    Jinja alone reads them as Python escapes ('\2' would be a control character). Template files and
    conditionals (when, that, until) are read as Jinja reads them."""

    def tokeniter(self, *args: Any, **kwargs: Any) -> Iterator[tuple[int, str, str]]:
        inside = False
        for lineno, kind, value in super().tokeniter(*args, **kwargs):
            if kind == jinja2.lexer.TOKEN_VARIABLE_BEGIN:
                inside = True
            elif kind == jinja2.lexer.TOKEN_VARIABLE_END:
                inside = False
            elif inside and kind == jinja2.lexer.TOKEN_STRING:
                value = value.replace("\\", "\\\\")
            yield lineno, kind, value


class _YamlEnvironment(NativeEnvironment):
    @cached_property
    def lexer(self) -> jinja2.lexer.Lexer:
        return _YamlLexer(self)


@cache
def _environments() -> tuple[jinja2.Environment, NativeEnvironment, NativeEnvironment]:
    """Template files (text), YAML values (native, Ansible's backslashes) and conditionals (native)."""
    from ansible.plugins.test.core import TestModule

    # Ansible's template module renders with trim_blocks on and keeps the file's last newline.
    text = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    native = _YamlEnvironment(undefined=jinja2.StrictUndefined)
    conditional = NativeEnvironment(undefined=jinja2.StrictUndefined)
    for env in (text, native, conditional):
        # Where Ansible 2.19 replaces a Jinja builtin (default, map, select, defined ...) with its own, which
        # expects Ansible's templar, Jinja's works the same for plain data: keep it.
        env.filters.update({k: v for k, v in _filters().items() if k not in env.filters})
        env.tests.update({k: v for k, v in TestModule().tests().items() if k not in env.tests})
    return text, native, conditional


# A role's files are read once per process: a host class reads them for each of its roles (building their
# paths again was a fifth of rendering 625 partitions).
@cache
def _role_yaml(role: str, folder: str) -> Mapping[str, Any]:
    """A role's defaults, vars or meta (``folder``/main.yml); empty when it has none."""
    path = ansible_dir() / "roles" / role / folder / "main.yml"
    return dict(yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


@cache
def _template_source(role: str, template: str) -> str:
    return (ansible_dir() / "roles" / role / "templates" / template).read_text()


@cache
def _dependencies(role: str) -> tuple[str, ...]:
    meta = _role_yaml(role, "meta")
    deps = [d["role"] if isinstance(d, dict) else str(d) for d in meta.get("dependencies") or []]
    return tuple(r for dep in deps for r in (*_dependencies(dep), dep))


@cache
def _native(source: str) -> jinja2.Template:
    """Compiled once: every host class renders the same role variables (compiling is most of the cost)."""
    return _environments()[1].from_string(source)


@cache
def _conditional(source: str) -> jinja2.Template:
    return _environments()[2].from_string(source)


@cache
def _text(source: str) -> jinja2.Template:
    return _environments()[0].from_string(source)


def _fill(template: jinja2.Template, scope: Mapping[str, Any]) -> Any:
    """``template.render(scope)`` without copying ``scope`` into a new dict: a host's variables are hundreds and
    a host class renders dozens of templates with them (the copies were a quarter of rendering)."""
    # shared=True makes the mapping the context's parent as it is; Jinja's globals (range, dict ...) behind it.
    ctx = template.new_context(ChainMap(scope, template.globals), shared=True)  # type: ignore[arg-type]
    try:
        return template.environment.concat(template.root_render_func(ctx))
    except Exception:
        return template.environment.handle_exception()  # Jinja's own traceback, as render() gives


_ABSENT = object()  # a variable a host does not have


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


class _Scope(Mapping[str, Any]):
    """A host's variables, each template among them rendered when it is first read, as Ansible does: a
    variable that reads another gets that one's value, never its text (a `| bool` of the text is False, and
    Ansible 2.19 warns); one that needs what only a run has (a probe's output, a lookup), or reads one that
    does, stays a template. Reading only what is read matters: a host class renders 1-3 of a role's dozen
    templated variables (rendering them all was half of expanding 10,000 nodes)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._raw = values  # as given: what a rendering's reads are compared by (_Renderer's reuse)
        self._values = dict(values)
        self._pending = {k for k, v in self._values.items() if _is_template(v)}
        self._unresolved: set[str] = set()
        self._reading: list[str] = []  # the variables being rendered, innermost last
        self._deps: dict[str, frozenset[str]] = {}  # a rendered variable -> every variable its rendering read
        self._recorders: list[set[str]] = []

    def _note(self, key: str) -> None:
        if self._recorders:
            found = self._deps.get(key, frozenset()) | {key}
            for names in self._recorders:
                names |= found

    @contextmanager
    def recording(self) -> Iterator[set[str]]:
        """The names of every variable read inside the block, with those each read variable's rendering read
        (also when it was rendered earlier): what the block's result depends on."""
        names: set[str] = set()
        self._recorders.append(names)
        try:
            yield names
        finally:
            self._recorders.pop()

    def raw(self, key: str) -> Any:
        """The variable as given (a template's text), or _ABSENT."""
        return self._raw.get(key, _ABSENT)

    def __getitem__(self, key: str) -> Any:
        self._note(key)
        if key in self._pending:
            with self.recording() as names:
                self._settle(key)
            self._deps[key] = frozenset(names)
        if key in self._unresolved and self._reading:
            self._unresolved.add(self._reading[-1])  # what reads a template that stays one stays one too
        return self._values[key]

    def _settle(self, key: str) -> None:
        self._pending.discard(key)  # first: a cycle reads the text, and fails below
        self._reading.append(key)
        try:
            value = _fill(_native(self._values[key]), self)
        except Exception:  # anything only a run supplies: a template that uses it fails in render()
            value = jinja2.Undefined()
        finally:
            self._reading.pop()
        if isinstance(value, jinja2.Undefined):  # e.g. an attribute of a probe's result: kept as a template
            self._unresolved.add(key)
        elif key not in self._unresolved:
            self._values[key] = value

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._note(key)
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


class Inventory:
    """An inventory as Ansible reads it: each host's groups and merged variables, and `groups`."""

    def __init__(self, inventory: Mapping[str, Any]) -> None:
        self.groups: dict[str, list[str]] = {}
        self.host_vars: dict[str, dict[str, Any]] = {}
        self.group_vars: dict[str, list[Mapping[str, Any]]] = {}  # in order of depth, as Ansible merges
        self._walk("all", inventory["all"], [])

    def _walk(self, name: str, group: Mapping[str, Any], parents: list[Mapping[str, Any]]) -> list[str]:
        chain = [*parents, group.get("vars") or {}]
        hosts = list(group.get("hosts") or {})
        for host, own in (group.get("hosts") or {}).items():
            self.host_vars.setdefault(host, {}).update(own or {})
            self.group_vars.setdefault(host, []).extend(v for v in chain if v)
        for child_name, child in (group.get("children") or {}).items():
            hosts += self._walk(child_name, child, chain)
        self.groups[name] = list(dict.fromkeys(hosts))
        return self.groups[name]

    def variables(self, host: str) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for layer in self.group_vars.get(host, []):
            merged.update(layer)
        return {**merged, **self.host_vars.get(host, {})}


def host_context(
    inventory: Inventory, extravars: Mapping[str, Any], host: str, role: str, **facts: Any
) -> Mapping[str, Any]:
    """The variables `role` sees on `host` (``inventory_hostname`` may be set in ``facts`` to name a class)."""
    ctx: dict[str, Any] = {"inventory_hostname": host, "groups": inventory.groups, "hostvars": _HostVars(inventory)}
    for name in (*_dependencies(role), role):
        ctx.update(_role_yaml(name, "defaults"))
    ctx.update(inventory.variables(host))
    ctx.update(_role_yaml(role, "vars"))
    ctx.update(facts)
    ctx.update(extravars)
    # Templated when read, in one scope: a role variable reads a default's value, never its text.
    return _Scope(ctx)


class _HostVars(dict[str, Any]):
    """`hostvars[name]` for the role defaults that read another host's address."""

    def __init__(self, inventory: Inventory) -> None:
        super().__init__()
        self.inventory = inventory

    def __missing__(self, host: str) -> dict[str, Any]:
        return self.inventory.variables(host)


class RenderError(RuntimeError):
    """A template needed what only a run on the host can tell."""


def render(role: str, template: str, ctx: Mapping[str, Any], *, braces: bool = False) -> str:
    out = str(_fill(_text(_template_source(role, template)), ctx))
    if ("{{" in out and not braces) or "{%" in out:  # a variable left unresolved (it needs a run) written as it stands
        line = next(li for li in out.splitlines() if "{{" in li or "{%" in li)
        raise RenderError(f"{role}/templates/{template}: needs what only a run can tell: {line.strip()}")
    return out


def render_value(source: str, ctx: Mapping[str, Any]) -> Any:
    """A task argument or variable as Ansible templates it: native types kept."""
    return _fill(_native(source), ctx)


def _true(expression: str, ctx: Mapping[str, Any]) -> bool:
    return bool(_fill(_conditional("{{ " + expression + " }}"), ctx))


# --- every file, once per host class -------------------------------------------------------------------


def host_classes(inventory: Inventory, partitions: Sequence[tuple[str, Sequence[str]]]) -> list[HostClass]:
    """The controller, each login host and each declaring partition's nodes (``partitions``: group name and
    hosts). A login host that is also the controller is the controller's class."""
    controller = inventory.groups.get("slurm_controller", [])[:1]
    out = [HostClass(h, h, (h,), "controller") for h in controller]
    out += [HostClass(h, h, (h,), "login") for h in inventory.groups.get("slurm_login", []) if h not in controller]
    out += [HostClass(collect_names(h), group, tuple(h), "compute") for group, h in partitions]
    return out


def render_all(
    inventory: Mapping[str, Any],
    extravars: Mapping[str, Any],
    partitions: Sequence[tuple[str, Sequence[str]]],
    fabric: str | None = None,
) -> list[Rendered]:
    """Every config of every host class; topology.conf too when ``fabric`` (ibnetdiscover output) is given."""
    inv = Inventory(inventory)
    classes = host_classes(inv, partitions)
    out: list[Rendered] = []
    topology, plugin = _topology(inv, extravars, fabric)
    if topology:
        out.append(topology_file(inv, extravars, topology))
    renderer = _Renderer(inv, extravars, {"slurm_topology_plugin": plugin} if topology else {})
    if classes:
        every = _conf_hosts(inv, bool(extravars.get("slurm_configless")))
        cluster = HostClass(collect_names(every), "all", tuple(every), "cluster")
        out += [r for c in CONFIGS if c.scope == "cluster" for r in renderer.one(c, cluster, classes[0].hosts[0])]
    dbd = set(inv.groups.get("slurm_dbd", []))
    for klass in classes:
        for config in CONFIGS:
            if config.scope == klass.scope or (config.scope == "dbd" and klass.hosts[0] in dbd):
                out += renderer.one(config, klass, klass.hosts[0])
    return out


# What each role learns at run time, as CONFIGS assumes it: one context per role and host class serves all
# of the role's files.
_ROLE_FACTS: dict[str, dict[str, Any]] = {}
for _config in CONFIGS:
    _ROLE_FACTS.setdefault(_config.role, {}).update(_config.facts)


class _Renderer:
    def __init__(self, inv: Inventory, extravars: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
        self.inv = inv
        self.extravars = extravars
        self.facts = facts
        self.contexts: dict[tuple[str, str], Mapping[str, Any]] = {}
        # A config whose every read variable is given alike in another class renders alike: reused, not
        # rendered again (most of a partition's files are the same in every partition of a large cluster).
        self.done: dict[int, list[tuple[tuple[tuple[str, Any], ...], list[Rendered]]]] = {}
        self.rendered = 0
        self.reused = 0

    def context(self, role: str, klass: HostClass, host: str) -> Mapping[str, Any]:
        key = (role, klass.folder)
        if key not in self.contexts:
            # The class's first host gives the variables; its hostlist names it in the files' headers.
            facts = {**_ROLE_FACTS.get(role, {}), **self.facts, "inventory_hostname": klass.label}
            self.contexts[key] = host_context(self.inv, self.extravars, host, role, **facts)
        return self.contexts[key]

    def one(self, config: Config, klass: HostClass, host: str) -> list[Rendered]:
        ctx = self.context(config.role, klass, host)
        assert isinstance(ctx, _Scope)
        earlier = self.done.setdefault(id(config), [])  # CONFIGS' entries live as long as the module
        for reads, out in earlier:
            if all(_same(ctx.raw(name), value) for name, value in reads):
                self.reused += 1
                return [replace(r, path=f"{klass.folder}{r.dest}", hosts=klass.label) for r in out]
        with ctx.recording() as names:
            out = self._render(config, klass, ctx)
        self.rendered += 1
        # Only the latest few: a file whose header names its hosts differs in every class, and is never reused.
        earlier[:] = [*earlier[-(_KEEP - 1) :], (tuple((name, ctx.raw(name)) for name in names), out)]
        return out

    @staticmethod
    def _render(config: Config, klass: HostClass, ctx: Mapping[str, Any]) -> list[Rendered]:
        if not _true(config.when, ctx):
            return []
        dest = _fill(_text(config.dest), ctx)
        text = render(config.role, config.template, ctx, braces=config.braces)
        # The label is the class's hostlist already (collecting 10,000 names again per file cost 20 %).
        return [
            Rendered(f"{klass.folder}{dest}", dest, klass.label, config.role, config.template, text, config.assumes)
        ]


_KEEP = 4


def _same(a: Any, b: Any) -> bool:
    return a is b or (a is not _ABSENT and b is not _ABSENT and type(a) is type(b) and a == b)


def _slurm_hosts(inv: Inventory) -> list[str]:
    groups = ("slurm_controller", "slurm_dbd", "slurm_compute", "slurm_login")
    return list(dict.fromkeys(h for name in groups for h in inv.groups.get(name, [])))


def _conf_hosts(inv: Inventory, configless: bool) -> list[str]:
    """The hosts that hold slurm.conf: every Slurm host, but in configless mode not the nodes that are only
    compute nodes (their slurmd fetches it from slurmctld; slurm_common's slurm_common_holds_conf)."""
    every = _slurm_hosts(inv)
    if not configless:
        return every
    keep = {h for name in ("slurm_controller", "slurm_dbd", "slurm_login") for h in inv.groups.get(name, [])}
    compute = set(inv.groups.get("slurm_compute", []))
    return [h for h in every if h in keep or h not in compute]


# --- topology.conf: the infiniband role's own filter ------------------------------------------------------------


def topology_filter() -> Callable[[str, list[str]], str]:
    found: Callable[[str, list[str]], str] = topology_module().FilterModule().filters()["hpckit_topology_conf"]
    return found


def _topology(inv: Inventory, extravars: Mapping[str, Any], fabric: str | None) -> tuple[str, str]:
    """topology.conf and its TopologyPlugin as the infiniband role's tasks/topology.yml decides them: the text
    hpckit rendered from the blueprint (``given``), else the fabric's (read at run time: here only when a
    dump is given), else none; ``off`` writes none."""
    controller = inv.groups.get("slurm_controller", [""])[0]
    ctx = host_context(inv, extravars, controller, "infiniband")
    mode = ctx["infiniband_topology"]
    if mode == "given":
        text = str(ctx["infiniband_topology_given"])
    elif mode != "off" and fabric is not None:
        text = topology_filter()(fabric, list(ctx["infiniband_topology_nodes"]))
    else:
        text = ""
    return text, str(ctx["infiniband_topology_plugin"])


def topology_file(inv: Inventory, extravars: Mapping[str, Any], text: str) -> Rendered:
    controller = inv.groups.get("slurm_controller", [""])[0]
    conf_dir = host_context(inv, extravars, controller, "infiniband")["infiniband_slurm_conf_dir"]
    dest = f"{conf_dir}/topology.conf"
    return Rendered(
        f"all{dest}",
        dest,
        collect_names(_slurm_hosts(inv)),
        "infiniband",
        "tasks/topology.yml",
        text,
        "from the blueprint's topology, or the ibnetdiscover output given (a deploy reads the fabric itself)",
    )
