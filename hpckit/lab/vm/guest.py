"""What the VM image carries of hpckit's own: two boot units and their scripts, and a few settings.

The image is the same for every machine and every cluster (it is cached by content). What makes a
machine itself reaches it at boot:
- its address and hostname on the kernel command line (``hpckit.ip=ADDR/PREFIX systemd.hostname=NAME``),
  read on every boot by hpckit-vm-network.service;
- its SSH host key, root's authorized key and /etc/hosts on a small per-machine seed disk (a tar file
  as the second virtio disk), unpacked once, on first boot, by hpckit-vm-seed.service. Secrets (the
  host key) must not sit on the command line: every user of the machine can read /proc/cmdline.

Nothing here routes anywhere: the default route ends in a dummy device, so Ansible finds a default
address (the machine's own) and nothing leaves the lab's subnet.
"""

from __future__ import annotations

NET_IFACE = "eth0"  # with net.ifnames=0 on the command line
SEED_DEVICE = "/dev/vdb"
SEEDED_MARK = "/var/lib/hpckit-vm/seeded"

_NETWORK_SCRIPT = f"""\
#!/bin/sh
# The address this machine was started with (hpckit.ip=ADDR/PREFIX on the kernel command line).
set -eu
addr=$(tr ' ' '\\n' </proc/cmdline | sed -n 's/^hpckit\\.ip=//p' | tail -n 1)
[ -n "$addr" ] || {{ echo "no hpckit.ip= on the kernel command line" >&2; exit 1; }}
# The driver is loaded early (modules-load.d), not on udev's coldplug, which emulated CPUs take minutes over.
tries=0
until [ -e /sys/class/net/{NET_IFACE} ]; do
  tries=$((tries + 1))
  [ "$tries" -le 300 ] || {{ echo "no {NET_IFACE} after 60 s" >&2; exit 1; }}
  sleep 0.2
done
ip link set lo up
ip addr replace "$addr" dev {NET_IFACE}
ip link set {NET_IFACE} up
# A default route into a dummy device: Ansible's default address is this one, and nothing goes out.
ip link show dead0 >/dev/null 2>&1 || ip link add dead0 type dummy
ip link set dead0 up
ip route replace default dev dead0 src "${{addr%/*}}"
"""

_SEED_SCRIPT = f"""\
#!/bin/sh
# First boot: this machine's SSH host key, root's authorized key and /etc/hosts, from its seed disk.
set -eu
# The disk's node comes with its driver (in the initramfs), long before udev announces it.
tries=0
until [ -b {SEED_DEVICE} ]; do
  tries=$((tries + 1))
  [ "$tries" -le 300 ] || {{ echo "no {SEED_DEVICE} after 60 s" >&2; exit 1; }}
  sleep 0.2
done
tar -xf {SEED_DEVICE} -C / --no-overwrite-dir
mkdir -p "$(dirname {SEEDED_MARK})"
touch {SEEDED_MARK}
"""

_NETWORK_UNIT = """\
[Unit]
Description=hpckit: this machine's address from the kernel command line
After=systemd-modules-load.service
Before=network.target network-online.target ssh.service
Wants=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/hpckit-vm-network

[Install]
WantedBy=multi-user.target network-online.target
"""

_SEED_UNIT = f"""\
[Unit]
Description=hpckit: this machine's keys and hosts from its seed disk (first boot)
ConditionPathExists=!{SEEDED_MARK}
After=local-fs.target
Before=ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/hpckit-vm-seed

[Install]
WantedBy=multi-user.target
"""

_SSHD_CONFIG = """\
# hpckit VM: keys only, and room for Ansible's many parallel connections.
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
MaxStartups 200:30:400
MaxSessions 64
"""

# path in the image -> (text, mode)
IMAGE_FILES: dict[str, tuple[str, int]] = {
    "/usr/local/sbin/hpckit-vm-network": (_NETWORK_SCRIPT, 0o755),
    "/usr/local/sbin/hpckit-vm-seed": (_SEED_SCRIPT, 0o755),
    "/etc/systemd/system/hpckit-vm-network.service": (_NETWORK_UNIT, 0o644),
    "/etc/systemd/system/hpckit-vm-seed.service": (_SEED_UNIT, 0o644),
    "/etc/ssh/sshd_config.d/hpckit.conf": (_SSHD_CONFIG, 0o644),
    "/etc/modules-load.d/hpckit-vm.conf": ("virtio_net\ndummy\n", 0o644),
    "/etc/fstab": ("/dev/vda / ext4 rw,errors=remount-ro 0 1\n", 0o644),
    # The machines have no network beyond the lab: no archive, no name server. `apt-get update` then
    # succeeds (nothing to fetch) and every package a role asks for is already installed.
    "/etc/apt/sources.list": ("# hpckit VM image: no archive (the machines have no network beyond the lab)\n", 0o644),
    "/etc/resolv.conf": ("", 0o644),
    "/etc/hostname": ("localhost\n", 0o644),
}

ENABLED_UNITS = ("hpckit-vm-network.service", "hpckit-vm-seed.service", "ssh.service")
# Installed for the roles, which enable and start what a machine's role needs; the rest stays off so
# that emulated CPUs do not spend a boot starting MariaDB on a compute node.
DISABLED_UNITS = (
    "mariadb.service",
    "slurmctld.service",
    "slurmd.service",
    "slurmdbd.service",
    "munge.service",
    "nfs-server.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "man-db.timer",
    "e2scrub_all.timer",
    "fstrim.timer",
    "dpkg-db-backup.timer",
    "e2scrub_reap.service",
    "nfs-blkmap.service",
)
# Per-install secrets a shared image must not carry: each machine gets its own.
REMOVED_FILES = (
    "/etc/ssh/ssh_host_*",
    "/etc/munge/munge.key",
    "/var/lib/dbus/machine-id",
)


def kernel_cmdline(address: str, prefixlen: int, hostname: str) -> str:
    """The kernel command line of one machine: root disk, serial console, address and hostname."""
    return " ".join(
        [
            "root=/dev/vda",
            "rw",
            "console=ttyS0",
            "quiet",  # every character on the emulated serial port costs: errors only
            "net.ifnames=0",
            "panic=5",  # a kernel panic reboots the machine (qemu runs on) rather than hanging it
            f"systemd.hostname={hostname}",
            f"hpckit.ip={address}/{prefixlen}",
        ]
    )


def hosts_text(hosts: dict[str, str]) -> str:
    """/etc/hosts for every machine of a lab: name -> address."""
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
    lines += [f"{address} {name}" for name, address in hosts.items()]
    return "\n".join(lines) + "\n"
