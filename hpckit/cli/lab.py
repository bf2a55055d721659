"""`hpckit lab ...`: namespace machines on this box. Thin: every decision lives in hpckit.lab."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import click

from hpckit import lab as labkit
from hpckit import proc
from hpckit.lab.blueprint import BlueprintLike
from hpckit.lab.container_image import container_image
from hpckit.lab.vm.mirror import host_codename

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _lab_errors(func: Callable[_P, _R]) -> Callable[_P, _R]:
    """A LabError is the user's to fix: print it, exit 1, no traceback."""

    @functools.wraps(func)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return func(*args, **kwargs)
        except labkit.LabError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


state_root_option = click.option(
    "--state-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=labkit.DEFAULT_STATE_ROOT,
    show_default=True,
    help="where labs keep their state",
)
cluster_option = click.option("--cluster", "-c", help="the lab's name (default: the only lab that is up)")


@click.group("lab")
def lab() -> None:
    """Machines on this box: Linux namespaces (each node its own IP, hostname, /etc and sshd) or virtual
    machines with their own kernel and systemd."""


@lab.command()
@click.argument("blueprint", required=False, type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option(
    "--spec",
    "spec_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="a lab spec JSON (the spec.json a lab keeps) instead of a blueprint",
)
@click.option("--install-missing", is_flag=True, help="apt-get install missing host packages first")
@state_root_option
@_lab_errors
def up(blueprint: Path | None, spec_file: Path | None, install_missing: bool, state_root: Path) -> None:
    """Bring up the lab a BLUEPRINT (provider type `lab`: namespaces, `vm`: virtual machines) describes;
    nodes already up stay up."""
    spec = _spec_from_args(blueprint, spec_file)
    vm = isinstance(spec, labkit.VmSpec)
    missing = labkit.missing_vm_packages() if vm else labkit.missing_packages()
    if missing and install_missing:
        click.echo(f"installing {' '.join(missing)} ...", err=True)
        labkit.install_packages(missing)
    if isinstance(spec, labkit.VmSpec):
        _print_status(labkit.vm_up(spec.with_state_root(state_root), log=lambda line: click.echo(line, err=True)))
    else:
        _print_status(labkit.lab_up(dataclasses.replace(spec, state_root=state_root)))


@lab.command()
@cluster_option
@state_root_option
@_lab_errors
def down(cluster: str | None, state_root: Path) -> None:
    """Stop every node and remove the lab's bridge, links, mount points and state."""
    name = _cluster(cluster, state_root)
    labkit.lab_down(name, state_root)
    click.echo(f"lab {name} is down")


@lab.command()
@cluster_option
@state_root_option
@click.option("--json", "as_json", is_flag=True, help="print the status as JSON")
@_lab_errors
def status(cluster: str | None, state_root: Path, as_json: bool) -> None:
    """Show each node: running?, PID 1 on the host, address, whether sshd answers."""
    result = labkit.lab_status(_cluster(cluster, state_root), state_root)
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(result), indent=2, default=str))
    else:
        _print_status(result)
    if not result.all_up:
        sys.exit(1)


@lab.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@cluster_option
@state_root_option
@click.argument("node")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@_lab_errors
def exec_(cluster: str | None, state_root: Path, node: str, command: tuple[str, ...]) -> None:
    """Run COMMAND as root inside NODE (hpckit lab exec node1 -- hostname)."""
    if command[:1] == ("--",):  # once NODE is read, click hands a later "--" through as an argument
        command = command[1:]
    argv = labkit.exec_argv(_cluster(cluster, state_root), node, command, state_root)
    sys.exit(proc.interactive(argv))


@lab.command("install-packages")
@_lab_errors
def install_packages() -> None:
    """apt-get install the Debian packages the lab needs (daemons are not started on the host)."""
    installed = labkit.install_packages()
    click.echo(f"installed: {' '.join(installed)}" if installed else "all lab packages are installed")


@lab.command("image")
@click.option("--build/--no-build", default=True, show_default=True, help="build the image when the cache lacks it")
@_lab_errors
def image(build: bool) -> None:
    """Print the folder of the VM labs' Debian 13 image (base.qcow2, vmlinuz, initrd.img), building it first."""
    found = labkit.ensure_image(log=lambda line: click.echo(line, err=True)) if build else labkit.cached_image()
    if found is None:
        raise labkit.LabError("the VM image is not built yet (`hpckit lab image` builds it)")
    click.echo(str(found.folder))


@lab.command("container-image")
@click.argument("suite", required=False)
@_lab_errors
def container_image_cmd(suite: str | None) -> None:
    """Print the path of a registry-free container image (Debian SUITE, default this machine's release, minbase as
    squashfs, for `srun --container-image=PATH`), making it first from this machine's Debian archive."""
    made = container_image(suite or host_codename(), log=lambda line: click.echo(line, err=True))
    click.echo(str(made))


@lab.command("ssh-args")
@cluster_option
@state_root_option
@_lab_errors
def ssh_args(cluster: str | None, state_root: Path) -> None:
    """Print the ssh options that log in to the lab's nodes as root."""
    identity = labkit.ssh_identity(_cluster(cluster, state_root), state_root)
    click.echo(" ".join(identity.ssh_options()))


def _spec_from_args(blueprint: Path | None, spec_file: Path | None) -> labkit.LabSpec | labkit.VmSpec:
    if (blueprint is None) == (spec_file is None):
        raise labkit.LabError("give either a BLUEPRINT or --spec FILE")
    if spec_file is not None:
        text = spec_file.read_text(encoding="utf-8")
        try:
            vm = isinstance(json.loads(text).get("lab"), dict)  # a VM lab's vm.json holds its machines under "lab"
        except (ValueError, AttributeError):
            vm = False  # LabSpec.from_json says what is wrong
        if vm:
            return labkit.VmSpec.from_json(text, origin=str(spec_file))
        return labkit.LabSpec.from_json(text, origin=str(spec_file))
    assert blueprint is not None
    bp = _load_blueprint(blueprint)
    if getattr(bp.provider, "type", None) == "vm":
        return labkit.vm_spec_from_blueprint(bp)
    return labkit.spec_from_blueprint(bp)


def _load_blueprint(path: Path) -> BlueprintLike:
    """Load through hpckit.blueprint when present (looked up at run time: it lives in another room)."""
    try:
        loader: Callable[[Path], BlueprintLike] = importlib.import_module("hpckit.blueprint").load_blueprint
    except (ImportError, AttributeError):
        raise labkit.LabError("this hpckit cannot load blueprints yet; use `hpckit lab up --spec FILE`") from None
    return loader(path)


def _cluster(cluster: str | None, state_root: Path) -> str:
    if cluster is not None:
        return cluster
    labs = labkit.list_labs(state_root)
    if len(labs) == 1:
        return labs[0]
    if not labs:
        raise labkit.LabError(f"no lab is up (nothing under {state_root})")
    raise labkit.LabError(f"several labs are up ({', '.join(labs)}); pick one with --cluster")


def _print_status(result: labkit.LabStatus) -> None:
    click.echo(f"lab {result.cluster}: bridge {result.bridge} {result.host_address} ({result.subnet})")
    click.echo(f"{'NODE':<16} {'ADDRESS':<15} {'GPUS':>4}  {'STATE':<5} {'PID':>8}  SSHD")
    for node in result.nodes:
        state = "up" if node.up else "down"
        pid = str(node.pid) if node.pid is not None else "-"
        sshd = "yes" if node.sshd else "no"
        click.echo(f"{node.name:<16} {node.address:<15} {node.gpus:>4}  {state:<5} {pid:>8}  {sshd}")


COMMANDS = [lab]
