"""slurm.auth: munge (the default) or Slurm's own auth/slurm: validation, what slurm.conf and slurmdbd.conf
say, the extravars, and the health checks that follow from it."""

from __future__ import annotations

from jinja2 import Template

from hpckit.blueprint import parse_blueprint
from hpckit.clusters import SshAccess
from hpckit.deploy.playvars import build_vars
from hpckit.deploy.render import Inventory, host_context, render
from hpckit.health.deployvars import health_extravars
from hpckit.paths import ansible_dir
from tests.test_blueprint import GOOD, problems

CPU_ONLY = GOOD.replace(", gpus: {type: lab, count: 4}", "")


def with_slurm(text: str, lines: str) -> str:
    return text + "slurm:\n" + lines


AUTH_SLURM = with_slurm(CPU_ONLY, '  version: "24.11.5"\n  auth: slurm\n')


def rendered(text: str, role: str, template: str, host: str = "ctl") -> list[str]:
    inventory, extravars = build_vars(parse_blueprint(text, "bp.yaml"), SshAccess("root"))
    return render(role, template, host_context(Inventory(inventory), extravars, host, role)).splitlines()


def test_munge_is_the_default_everywhere() -> None:
    bp = parse_blueprint(CPU_ONLY, "bp.yaml")
    assert bp.slurm.auth == "munge"
    assert build_vars(bp, SshAccess("root"))[1]["slurm_auth"] == "munge"
    conf = rendered(CPU_ONLY, "slurm_common", "slurm.conf.j2")
    assert "AuthType=auth/munge" in conf and "CredType=cred/munge" in conf
    assert "host.munge" not in health_extravars(bp)["hpckit_health_settings"]["disabled_checks"]


def test_auth_slurm_sets_both_plugins_and_slurmdbd() -> None:
    assert build_vars(parse_blueprint(AUTH_SLURM, "bp.yaml"), SshAccess("root"))[1]["slurm_auth"] == "slurm"
    conf = rendered(AUTH_SLURM, "slurm_common", "slurm.conf.j2")
    assert "AuthType=auth/slurm" in conf and "CredType=cred/slurm" in conf
    assert not [line for line in conf if "munge" in line]
    # slurmdbd.conf holds the DB password, read on the host: only its AuthType line is rendered here.
    dbd = (ansible_dir() / "roles" / "slurm_accounting" / "templates" / "slurmdbd.conf.j2").read_text()
    line = next(li for li in dbd.splitlines() if li.startswith("AuthType="))
    assert Template(line).render(slurm_auth="slurm") == "AuthType=auth/slurm"


def test_auth_slurm_turns_the_munge_check_off_and_keeps_the_blueprint_s_own() -> None:
    text = AUTH_SLURM + "health:\n  disabled_checks: [host.clock]\n"
    settings = health_extravars(parse_blueprint(text, "bp.yaml"))["hpckit_health_settings"]
    assert settings["disabled_checks"] == ["host.clock", "host.munge"]


def test_auth_slurm_on_a_release_without_it_is_refused_at_the_line() -> None:
    # No version: the distribution's 22.05, which has no auth/slurm.
    found = problems(with_slurm(CPU_ONLY, "  auth: slurm\n"))
    assert len(found) == 1, found
    assert "slurm.auth: slurm needs Slurm 23.11 or newer" in found[0] and ":12:" in found[0], found
    assert parse_blueprint(AUTH_SLURM, "bp.yaml").slurm.auth == "slurm"


def test_an_unknown_auth_is_refused() -> None:
    found = problems(with_slurm(CPU_ONLY, "  auth: kerberos\n"))
    assert found and "auth" in found[0], found


def test_auth_keys_in_slurm_conf_are_refused_in_favour_of_slurm_auth() -> None:
    found = problems(with_slurm(CPU_ONLY, "  conf:\n    AuthType: auth/munge\n    CredType: cred/munge\n"))
    assert len(found) == 2 and all("set slurm.auth instead" in p for p in found), found
