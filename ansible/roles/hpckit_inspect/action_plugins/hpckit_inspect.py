"""Ansible action ``hpckit_inspect``: what a role manages on a host, read in one round trip, compared here.

Every role starts by asking the host, in one shell script without Python (as ``raw`` does), for what it
manages: the packages that are missing, owner:group:mode and SHA-1 of its files and folders, whether its
daemons run, and the role's own yes/no checks and readings. The files' wanted state is computed on the
Ansible host (each template rendered and hashed as the template module would write it), so the result
says what differs without a second trip:

    hpckit_inspect:
      packages: [slurmd]
      paths:                 # NAME: path, owner/group/mode wanted, template whose content is wanted
        spool: {path: /var/spool/slurmd, mode: "0755"}
        cgroup: {path: /etc/slurm/cgroup.conf, mode: "0644", template: cgroup.conf.j2}
        gres: {path: /etc/slurm/gres.conf, mode: "0644", template: gres.conf.j2, managed: false}
      services: [slurmd]
      checks: {registered: "sacctmgr -n list cluster | grep -q lab"}   # NAME: command, true on 0, false on 1
      reads: {versions: "ls /opt/x"}                                    # NAME: command, its output (trimmed)

returns ``missing`` (packages, in the order given), ``paths`` (NAME: "owner:group:mode sha1" as found: sha1
is ``-`` for a folder, all blank for a missing path), ``outdated`` (the managed paths that differ from the
wanted state), ``running`` (service: bool), ``checks``, ``reads``, and ``differs``: whether anything is
missing, outdated or not running. A path without a template is wanted as a folder; ``managed: false``
reads a path without comparing it. A check that exits with any other status than 0 or 1 could not answer:
the task fails with its status and stderr. The script only reads; it runs in check mode too, so a dry run
compares with the host.
"""

from __future__ import annotations

import base64
import hashlib
import shlex
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import lookup_loader

# The script's helpers. ssh may give the session a tty, which would mix stderr into the output: stderr goes
# to /dev/null (a copy kept on fd 3 for a person running the script by hand), and what a broken check printed
# there travels on stdout, base64-encoded on its own line.
# A check answers with its exit status, as test and grep do: 0 yes, 1 no; any other status (2 a syntax or usage
# error, 126/127 a command not runnable or not found, 128+N a signal) means it could not answer. Reading that as
# "no" would send the role on as if the host had said so: the script goes on to collect every answer, then
# exits 3, and the action fails the task with each broken check's status and stderr.
PROLOGUE = r"""exec 3>&2 2>/dev/null
broken=0
pkg() { dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null | grep -q '^ii' || printf 'm\t%s\n' "$1"; }
path() {
  if [ -d "$2" ]; then sum=-; else sum=$(sha1sum < "$2" 2>/dev/null | cut -c1-40); fi
  printf 'p\t%s\t%s %s\n' "$1" "$(stat -c %U:%G:%a "$2" 2>/dev/null)" "$sum"
}
yes_no() { if ( eval "$2" ) >/dev/null 2>&1; then printf '%s\t%s\ttrue\n' "$3" "$1"; else printf '%s\t%s\tfalse\n' "$3" "$1"; fi; }
check() {
  err=$( { ( eval "$2" ) >/dev/null; } 2>&1 ); rc=$?
  case $rc in
    0) printf 'c\t%s\ttrue\n' "$1" ;;
    1) printf 'c\t%s\tfalse\n' "$1" ;;
    *) broken=1
       printf 'e\t%s\t%s\t%s\n' "$1" "$rc" "$(printf '%s' "$err" | base64 -w0)"
       printf 'hpckit_inspect: check %s could not answer (exit %s): %s\n' "$1" "$rc" "$err" >&3 ;;
  esac
}
read_out() { printf 'r\t%s\t%s\n' "$1" "$( ( eval "$2" ) | base64 -w0)"; }
"""

OPTIONS = frozenset({"packages", "paths", "services", "checks", "reads"})


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = self._task.args
        unknown = set(args) - OPTIONS
        if unknown:
            raise AnsibleActionFail(f"hpckit_inspect: unknown option(s) {sorted(unknown)}; it takes {sorted(OPTIONS)}")
        packages = [str(p) for p in args.get("packages") or []]
        paths: dict[str, dict[str, Any]] = dict(args.get("paths") or {})
        services = [str(s) for s in args.get("services") or []]
        checks: dict[str, str] = dict(args.get("checks") or {})
        reads: dict[str, str] = dict(args.get("reads") or {})
        script = _script(packages, paths, services, checks, reads)
        done = self._low_level_execute_command(script, sudoable=True)
        found = _parse(done.get("stdout", ""))
        if found["e"]:
            return {**result, **done, "failed": True, "msg": _broken_checks(found["e"])}
        if done.get("rc", 0) != 0:
            return {**result, **done, "failed": True, "msg": "the inspection failed on the host"}
        wanted = {
            name: self._wanted(spec, task_vars) for name, spec in paths.items() if boolean(spec.get("managed", True))
        }
        outdated = [name for name, want in wanted.items() if found["p"].get(name) != want]
        running = {name: found["s"].get(name) == "true" for name in services}
        result.update(
            changed=False,
            missing=[p for p in packages if p in found["m"]],
            paths={name: found["p"].get(name, " ") for name in paths},
            outdated=outdated,
            running=running,
            checks={name: found["c"].get(name) == "true" for name in checks},
            reads={name: _decode(found["r"].get(name, "")) for name in reads},
        )
        result["differs"] = bool(result["missing"] or outdated or not all(running.values()))
        return result

    def _wanted(self, spec: dict[str, Any], task_vars: dict[str, Any]) -> str:
        """ "owner:group:mode sha1" as the script prints it for the state the role writes."""
        owner = str(spec.get("owner", "root"))
        group = str(spec.get("group", owner))
        mode = str(spec.get("mode", "0755")).lstrip("0") or "0"
        template = spec.get("template")
        if not template:
            return f"{owner}:{group}:{mode} -"
        lookup = lookup_loader.get("ansible.builtin.template", loader=self._loader, templar=self._templar)
        text = lookup.run([template], variables=task_vars)[0]
        return f"{owner}:{group}:{mode} {hashlib.sha1(str(text).encode('utf-8')).hexdigest()}"


def _script(
    packages: list[str],
    paths: dict[str, dict[str, Any]],
    services: list[str],
    checks: dict[str, str],
    reads: dict[str, str],
) -> str:
    q = shlex.quote
    lines = [PROLOGUE]
    lines += [f"pkg {q(p)}" for p in packages]
    lines += [f"path {q(name)} {q(str(spec['path']))}" for name, spec in paths.items()]
    lines += [f"yes_no {q(name)} {q('service ' + q(name) + ' status')} s" for name in services]
    lines += [f"check {q(name)} {q(str(command))}" for name, command in checks.items()]
    lines += [f"read_out {q(name)} {q(str(command))}" for name, command in reads.items()]
    # The script ends in exit: Ansible appends "&& sleep 0" after it, which sh reaches only as a syntax error.
    lines.append('if [ "$broken" = 0 ]; then exit 0; else exit 3; fi')
    return "\n".join(lines) + "\n"


def _parse(stdout: str) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {"m": {}, "p": {}, "s": {}, "c": {}, "r": {}, "e": {}}
    for line in stdout.splitlines():
        kind, _, rest = line.strip("\r").partition("\t")
        if kind == "m":
            found["m"][rest] = ""
        elif kind in found:
            name, _, value = rest.partition("\t")
            found[kind][name] = value
    return found


def _broken_checks(broken: dict[str, str]) -> str:
    """The failure's message: each check that could not answer, with its exit status and what it printed."""
    parts = []
    for name, value in broken.items():
        status, _, err = value.partition("\t")
        parts.append(f"check {name!r} could not answer (exit {status}): {_decode(err) or '(no output on stderr)'}")
    return "; ".join(parts)


def _decode(text: str) -> str:
    try:
        return base64.b64decode(text).decode("utf-8", errors="replace").strip()
    except ValueError:
        return ""
