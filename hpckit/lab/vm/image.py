"""The VM image: Debian 13 from debootstrap with Debian's kernel, cached by content.

An image is a folder ``<cache>/images/<key>/`` holding ``base.qcow2`` (the root filesystem, ext4 on
the whole disk), ``vmlinuz`` and ``initrd.img`` (booted with qemu's -kernel/-initrd: no boot loader),
and ``recipe.json`` (written last: an image without it is unfinished). The key hashes the recipe:
suite, packages, the Python requirements of /opt/hpckit, and every file hpckit puts in the image, so
a change to any of them builds a new image and an unchanged recipe reuses the cached one. The
debootstrapped system itself is kept too (``<cache>/images/debootstrap/<key>/``, keyed by suite and
packages alone), so that a change to hpckit's own files costs a minute, not a Debian install.

Everything the roles install is in the image (the machines have no network beyond the lab), and so
is a virtualenv at /opt/hpckit with hpckit's dependencies, for the login node's offline wheel install.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from hpckit import proc
from hpckit.lab import guards
from hpckit.lab.errors import LabError
from hpckit.lab.vm import guest
from hpckit.lab.vm.mirror import debian_mirror
from hpckit.paths import cache_dir

RECIPE_VERSION = 1
# What _configure does to the debootstrapped system; a change to it names a new image (not a new system).
CONFIGURE_VERSION = 2
SUITE = "trixie"  # Debian 13: Slurm 24.11 from the distribution
VENV = "/opt/hpckit"
# Every package a role installs (their *_packages defaults), plus what boots and runs the machine.
PACKAGES = (
    # boot, init, devices, the machine's own tools
    "linux-image-amd64",
    "initramfs-tools",
    "systemd-sysv",
    "udev",
    "dbus",
    "kmod",
    "e2fsprogs",
    "hostname",
    "iproute2",
    "iputils-ping",
    "procps",
    "less",
    # SSH and what Ansible's modules need on the managed side
    "openssh-server",
    "openssh-client",
    "python3",
    "python3-apt",
    "python3-venv",
    "python3-pymysql",
    "python3-packaging",  # Ansible's pip module (hpckit_login installs the wheel with it)
    "sudo",
    "rsync",
    # Slurm 24.11 and its authentication / accounting stack
    "munge",
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "slurm-client",
    "mariadb-server",
    # kernel NFS, server and client
    "nfs-kernel-server",
    "nfs-common",
)
_DISK_HEADROOM_MIB = 4096  # room on each machine's root for logs, MariaDB, Slurm state, the hpckit wheel
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_PIP_KEPT = ("PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_INDEX_URL")
Log = Callable[[str], None]


@dataclass(frozen=True)
class Recipe:
    """What an image is made of; its hash names the image."""

    suite: str
    packages: tuple[str, ...]
    python_requirements: tuple[str, ...]
    version: int = RECIPE_VERSION

    def to_json(self) -> str:
        data = {**asdict(self), "files": guest.IMAGE_FILES, "enabled": guest.ENABLED_UNITS}
        data["disabled"] = guest.DISABLED_UNITS
        data["configure"] = CONFIGURE_VERSION
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @property
    def key(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @property
    def system_key(self) -> str:
        """The hash of what debootstrap installs alone."""
        system = {"suite": self.suite, "packages": self.packages, "version": self.version}
        return hashlib.sha256(json.dumps(system, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Image:
    """A finished image's files."""

    folder: Path

    @property
    def base(self) -> Path:
        return self.folder / "base.qcow2"

    @property
    def kernel(self) -> Path:
        return self.folder / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.folder / "initrd.img"

    @property
    def recipe_file(self) -> Path:
        return self.folder / "recipe.json"

    @property
    def complete(self) -> bool:
        return self.recipe_file.is_file() and all(p.is_file() for p in (self.base, self.kernel, self.initrd))


def images_root() -> Path:
    return cache_dir() / "images"


def default_recipe() -> Recipe:
    return Recipe(SUITE, PACKAGES, hpckit_requirements())


def hpckit_requirements() -> tuple[str, ...]:
    """hpckit's runtime requirements (no extras), as its installed metadata lists them."""
    try:
        required = metadata.requires("hpckit") or []
    except metadata.PackageNotFoundError:
        raise LabError("hpckit is not installed (its requirements go into the VM image's /opt/hpckit)") from None
    return tuple(sorted(r.split(";", 1)[0].strip() for r in required if "extra ==" not in r))


def cached_image(recipe: Recipe | None = None, root: Path | None = None) -> Image | None:
    """The finished image of ``recipe`` when the cache has it."""
    image = Image((root or images_root()) / (recipe or default_recipe()).key)
    return image if image.complete else None


def ensure_image(recipe: Recipe | None = None, root: Path | None = None, log: Log | None = None) -> Image:
    """The image of ``recipe``, built first when the cache lacks it (needs root; minutes)."""
    recipe = recipe or default_recipe()
    root = root or images_root()
    image = Image(root / recipe.key)
    if image.complete:
        return image
    if os.geteuid() != 0:
        raise LabError("building the VM image needs root (debootstrap)")
    say = log or (lambda _: None)
    with images_locked(root):
        if image.complete:  # another process built it while this one waited
            return image
        started = time.monotonic()
        system = _system_tree(recipe, root, say)
        work = root / f".build-{recipe.key}"
        unmount_below(work)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(image.folder, ignore_errors=True)
        work.mkdir()
        checked(["cp", "-a", "--reflink=auto", str(system), str(work / "tree")], "copying the installed system")
        _finish(recipe, work, say)
        work.replace(image.folder)
        say(f"image {recipe.key} built in {time.monotonic() - started:.0f} s")
    return image


def _system_tree(recipe: Recipe, root: Path, log: Log) -> Path:
    """The debootstrapped system, kept apart from hpckit's own files: a change to those (a boot unit, the
    Python requirements) builds a new image from it without fetching and installing Debian again."""
    stage = root / "debootstrap" / recipe.system_key
    tree, done = stage / "tree", stage / "complete"
    if done.exists():
        return tree
    unmount_below(stage)
    shutil.rmtree(stage, ignore_errors=True)
    tree.mkdir(parents=True)
    mirror = debian_mirror()
    log(f"debootstrap {recipe.suite} from {mirror} ({len(recipe.packages)} packages and their dependencies)")
    started = time.monotonic()
    _debootstrap(recipe, tree, mirror)
    done.touch()
    log(f"debootstrap took {time.monotonic() - started:.0f} s")
    return tree


def _finish(recipe: Recipe, work: Path, log: Log) -> None:
    """hpckit's files, /opt/hpckit, the boot files and the disk, from the copied system in work/tree."""
    tree = work / "tree"
    log("configuring the image")
    _configure(tree)
    log(f"virtualenv {VENV} with hpckit's requirements")
    _python_venv(recipe, tree)
    _take_boot_files(tree, work)
    log("writing the disk")
    _make_disk(tree, work)
    shutil.rmtree(tree)
    (work / "recipe.json").write_text(recipe.to_json(), encoding="utf-8")


def _debootstrap(recipe: Recipe, tree: Path, mirror: str) -> None:
    argv = [
        "debootstrap",
        "--variant=minbase",
        "--components=main",
        f"--include={','.join(recipe.packages)}",
        recipe.suite,
        str(tree),
        mirror,
    ]
    checked(argv, f"debootstrap {recipe.suite} from {mirror}", timeout=3600)


def _configure(tree: Path) -> None:
    """hpckit's files and units; no archive, no per-install secrets, only the units a bare machine needs."""
    for pattern in guest.REMOVED_FILES:
        for found in glob.glob(str(tree) + pattern):
            Path(found).unlink()
    for leftover in (tree / "etc/apt/sources.list.d").glob("*"):
        leftover.unlink()
    for lists in (tree / "var/lib/apt/lists").glob("*_*"):
        lists.unlink()
    for rel, (text, mode) in guest.IMAGE_FILES.items():
        path = tree / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # /etc/resolv.conf may be a link
        path.write_text(text, encoding="utf-8")
        path.chmod(mode)
    (tree / "etc/machine-id").write_text("", encoding="utf-8")  # systemd makes one per machine at first boot
    _drop_sysv_scripts(tree)
    checked(["chroot", str(tree), "systemctl", "enable", *guest.ENABLED_UNITS], "enabling the image's units")
    present = [u for u in guest.DISABLED_UNITS if _unit_exists(tree, u)]
    checked(["chroot", str(tree), "systemctl", "disable", *present], "disabling the image's idle units")
    checked(["chroot", str(tree), "apt-get", "clean"], "cleaning apt's cache in the image")
    # What systemd would do on each machine's first boot (ConditionNeedsUpdate), done once here.
    checked(["chroot", str(tree), "journalctl", "--update-catalog"], "building the journal's catalog")
    for stamp in ("etc/.updated", "var/.updated"):
        (tree / stamp).touch()


def _drop_sysv_scripts(tree: Path) -> None:
    """The SysV init scripts of services systemd runs from units of their own. With a script there, every
    `systemctl enable` (each role's service task) also runs update-rc.d, a Perl program: 16 s of a 25 s enable
    on an idle emulated CPU, measured, and several times that while four machines share two cores. systemd
    never reads these scripts (its sysv generator skips a name a unit already has)."""
    for script in sorted((tree / "etc/init.d").glob("*")):
        if script.is_file() and _unit_exists(tree, f"{script.name}.service"):
            script.unlink()


def _unit_exists(tree: Path, unit: str) -> bool:
    return any(
        (tree / d / unit).exists() for d in ("lib/systemd/system", "usr/lib/systemd/system", "etc/systemd/system")
    )


def _python_venv(recipe: Recipe, tree: Path) -> None:
    """/opt/hpckit with hpckit's requirements from the package index. Some come as source only, so pip runs
    inside the image, on its own Python: the one build step with network, through this machine's name
    servers and trusting the certificates this machine trusts (its bundle, at the same path in the tree)."""
    resolv = tree / "etc/resolv.conf"
    shutil.copyfile("/etc/resolv.conf", resolv)
    bundle = tree / str(HOST_CA_BUNDLE).lstrip("/")
    own_bundle = bundle.read_bytes() if bundle.exists() else None
    bundle.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HOST_CA_BUNDLE, bundle)
    # This machine's other pip settings (local wheel folders, constraints) mean nothing inside the tree.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in _PIP_KEPT}
    try:
        checked(["chroot", str(tree), "python3", "-m", "venv", VENV], f"creating {VENV} in the image")
        install = [f"{VENV}/bin/python", "-m", "pip", "install", "-q", "--no-cache-dir", *recipe.python_requirements]
        checked(["chroot", str(tree), *install], f"installing hpckit's requirements into {VENV}", 1800, env)
    finally:
        resolv.write_text("", encoding="utf-8")
        if own_bundle is None:
            bundle.unlink()
        else:
            bundle.write_bytes(own_bundle)


def _take_boot_files(tree: Path, work: Path) -> None:
    """Debian's kernel and initramfs, beside the disk: qemu boots them directly."""
    kernels = sorted((tree / "boot").glob("vmlinuz-*"))
    initrds = sorted((tree / "boot").glob("initrd.img-*"))
    if not kernels or not initrds:
        raise LabError(f"the image has no kernel or initramfs under {tree / 'boot'}")
    shutil.copyfile(kernels[-1], work / "vmlinuz")
    shutil.copyfile(initrds[-1], work / "initrd.img")


def _make_disk(tree: Path, work: Path) -> None:
    """An ext4 filesystem filled from the tree (mkfs.ext4 -d: no loop device, no mount), then qcow2."""
    used_mib = _tree_mib(tree)
    raw = work / "root.raw"
    size = f"{used_mib + _DISK_HEADROOM_MIB}M"
    checked(["mkfs.ext4", "-q", "-F", "-L", "hpckit-root", "-d", str(tree), str(raw), size], "making the root fs")
    checked(["qemu-img", "convert", "-O", "qcow2", str(raw), str(work / "base.qcow2")], "converting to qcow2")
    raw.unlink()


def _tree_mib(tree: Path) -> int:
    total = 0
    for folder, _, files in os.walk(tree):
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                total += os.lstat(path).st_size
    return total // (1 << 20) + 1


def checked(argv: Sequence[str], what: str, timeout: float = 600, env: Mapping[str, str] | None = None) -> str:
    env = {**(os.environ if env is None else env), "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    try:
        result = proc.run(argv, timeout=timeout, env=env)
    except proc.TransportError as exc:
        raise LabError(f"{what}: {exc}") from None
    if result.rc != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise LabError(f"{what} failed (exit {result.rc}):\n{tail}")
    return result.stdout


def unmount_below(folder: Path) -> None:
    """Unmount what an interrupted debootstrap left mounted in the tree (/proc, /sys) before it is deleted."""
    prefix = str(folder.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text(encoding="utf-8").splitlines()]
    for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        checked(["umount", "--lazy", point], f"unmounting {point}")


def images_locked(root: Path | None = None) -> AbstractContextManager[None]:
    """One change to the image cache at a time on this machine (a build, or a benchmark emptying it)."""
    return guards.locked(root or images_root())
