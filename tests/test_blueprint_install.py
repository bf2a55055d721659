"""`slurm.version`, `slurm.install` and the keys that go with each way of installing: every problem located at
its key, as `hpckit validate` prints it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpckit.blueprint import parse_blueprint
from hpckit.blueprint.schema import blueprint_schema
from hpckit.deploy.apply import installable
from hpckit.errors import InputError
from hpckit.slurm_releases import build_features
from tests.test_blueprint import GOOD, problems

# GOOD ends at line 10: `slurm:` stands at line 11, its first key at line 12.


def slurm(body: str) -> str:
    return GOOD + "slurm:\n" + body


def test_no_version_is_the_distribution_s_slurm() -> None:
    bp = parse_blueprint(GOOD)
    assert bp.slurm.version is None and bp.slurm.install_mode == "distro"
    assert parse_blueprint(slurm('  version: "22.05.8"\n')).slurm.install_mode == "distro"


def test_a_newer_version_is_built_with_every_feature_on_the_controller_by_default() -> None:
    bp = parse_blueprint(slurm('  version: "24.11.5"\n'))
    assert bp.slurm.install_mode == "build"
    assert bp.slurm.build.host is None  # the controller
    assert bp.slurm.build.features == list(build_features())
    assert "restd" in bp.slurm.build.features and "pmix" in bp.slurm.build.features


def test_a_full_build_section_validates(tmp_path: Path) -> None:
    tarball = tmp_path / "slurm-24.11.5.tar.bz2"
    tarball.write_bytes(b"x")
    bp = parse_blueprint(
        slurm(
            f'  version: "24.11.5"\n  install: build\n  source: {tarball}\n  source_sha256: "{"a" * 64}"\n'
            "  build: {host: login, features: [pmix, hwloc, json, restd]}\n"
        )
    )
    assert bp.slurm.source == str(tarball) and bp.slurm.build.host == "login"
    url = "https://downloads.invalid/slurm/slurm-25.05.3.tar.bz2"
    assert parse_blueprint(slurm(f'  version: "25.05.3"\n  source: {url}\n')).slurm.source == url


def test_site_packages_validate() -> None:
    body = '  version: "25.11"\n  install: packages\n  packages: [/srv/debs/slurm-smd_25.11.2-1_amd64.deb]\n'
    assert parse_blueprint(slurm(body)).slurm.install_mode == "packages"
    repo = "  version: 25.11\n  install: packages\n  packages: ['deb http://repo.invalid/slurm bookworm main']\n"
    assert parse_blueprint(slurm(repo)).slurm.version == "25.11"  # an unquoted series keeps its trailing 0


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('  version: "24.11.5.1"\n', "bp.yaml:12:12: slurm.version: '24.11.5.1' is not a Slurm version"),
        ('  version: "19.05.1"\n', "bp.yaml:12:12: slurm.version: Slurm 19.05 is not a release hpckit knows"),
        ("  version: 24.1\n", "bp.yaml:12:12: slurm.version: Slurm 24.10 is not a release hpckit knows"),
        ("  install: source\n", "bp.yaml:12:12: slurm.install: Input should be 'distro', 'build' or 'packages'"),
    ],
)
def test_versions_and_modes_are_checked(body: str, expected: str) -> None:
    got = problems(slurm(body))
    assert len(got) == 1 and got[0].startswith(expected), got


def test_a_build_older_than_23_11_is_refused_with_what_to_do() -> None:
    (got,) = problems(slurm('  version: "22.05.8"\n  install: build\n'))
    assert got.startswith("bp.yaml:12:12: slurm.version: Slurm 22.05 cannot be built by hpckit:")
    assert "SchedMD's own Debian packaging, which its tarballs carry from 23.11 on" in got
    assert "use install: distro for the distribution's 22.05" in got
    (old,) = problems(slurm('  version: "23.02.7"\n'))  # a build by default
    assert "Slurm 23.02 cannot be built by hpckit" in old


def test_a_build_needs_an_exact_release() -> None:
    assert problems(slurm('  version: "24.11"\n')) == [
        "bp.yaml:12:12: slurm.version: a build needs the exact release (24.11.N), not the series 24.11"
    ]
    assert problems(slurm("  install: build\n")) == [
        'bp.yaml:12:12: slurm.install: install: build needs slurm.version, the release to build (e.g. "24.11.5")'
    ]


def test_unknown_and_incomplete_features_are_named_at_their_place() -> None:
    got = problems(slurm('  version: "24.11.5"\n  build:\n    features: [pmix, restd, gdrcopy]\n'))
    assert got == [
        "bp.yaml:14:15: slurm.build.features: SchedMD's Debian packaging always builds restd, json (slurmrestd "
        "has a package of its own): add json",
        "bp.yaml:14:22: slurm.build.features[1]: restd does not build without json",
        "bp.yaml:14:29: slurm.build.features[2]: unknown build feature 'gdrcopy'; known: "
        + ", ".join(build_features()),
    ]


def test_the_build_host_must_be_declared() -> None:
    assert problems(slurm('  version: "24.11.5"\n  build: {host: builder}\n')) == [
        "bp.yaml:13:17: slurm.build.host: build host 'builder' is not a declared host (controller, login or node)"
    ]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("slurm-24.11.5.tar.bz2", "a local source must be an absolute path (or an http or https URL)"),
        ("/nonexistent/slurm-24.11.5.tar.bz2", "cannot read /nonexistent/slurm-24.11.5.tar.bz2 on this machine"),
        ("ftp://files.invalid/slurm-24.11.5.tar.bz2", "is not a URL hpckit fetches (http or https)"),
        ("https://files.invalid/slurm-24.11.6.tar.bz2", "is Slurm 24.11.6, but slurm.version is 24.11.5"),
        ("/srv/slurm-wlm_24.11.4.orig.tar.gz", "is Slurm 24.11.4, but slurm.version is 24.11.5"),
    ],
)
def test_the_source_is_a_url_or_a_readable_file_of_that_release(source: str, expected: str) -> None:
    got = problems(slurm(f'  version: "24.11.5"\n  source: {source}\n'))
    assert got[0].startswith("bp.yaml:13:11: slurm.source: ") and expected in got[0], got


def test_a_directory_is_not_a_source(tmp_path: Path) -> None:
    (got,) = problems(slurm(f'  version: "24.11.5"\n  source: {tmp_path}\n'))
    assert "not a readable file" in got


def test_keys_of_another_way_of_installing_are_refused() -> None:
    got = problems(slurm('  version: "24.11.5"\n  packages: [/srv/a.deb]\n  build: {host: ctl}\n  source_sha256: x\n'))
    assert got == [
        "bp.yaml:13:13: slurm.packages: packages goes with install: packages; this blueprint installs Slurm by build",
        "bp.yaml:15:18: slurm.source_sha256: source_sha256 goes with source (the tarball it is the hash of)",
    ]
    distro = problems(slurm("  source: https://files.invalid/slurm-24.11.5.tar.bz2\n"))
    assert distro == [
        "bp.yaml:12:11: slurm.source: source goes with install: build; this blueprint installs Slurm by distro"
    ]


def test_distro_names_only_the_distribution_s_release() -> None:
    (got,) = problems(slurm('  version: "24.11.5"\n  install: distro\n'))
    assert got.startswith("bp.yaml:12:12: slurm.version: the distribution's Slurm is 22.05, not 24.11.5: use")


def test_site_packages_are_debs_or_an_apt_source() -> None:
    assert problems(slurm("  install: packages\n")) == [
        "bp.yaml:12:12: slurm.install: install: packages needs slurm.packages: the site's Slurm .debs or its apt "
        "source line"
    ]
    (got,) = problems(slurm("  install: packages\n  packages: [slurm-smd]\n"))
    assert got.startswith("bp.yaml:13:14: slurm.packages[0]: 'slurm-smd' is neither a .deb")


def test_the_schema_offers_the_features_and_the_modes() -> None:
    props = blueprint_schema()["$defs"]["SlurmSettings"]["properties"]
    text = json.dumps(props)
    assert '"distro", "build", "packages"' in text and all(f'"{f}"' in text for f in build_features())
    assert {"version", "install", "source", "source_sha256", "build", "packages"} <= set(props)


@pytest.mark.parametrize("version", [None, "22.05.8", "24.11.5"])
def test_an_expanded_blueprint_validates_again(version: str | None) -> None:
    """The record and `hpckit expand` hold every key with its default: that says nothing of the install."""
    text = slurm(f'  version: "{version}"\n') if version else GOOD
    expanded = parse_blueprint(text).model_dump(mode="json")
    assert parse_blueprint(json.dumps(expanded)).slurm.install_mode == parse_blueprint(text).slurm.install_mode


def test_deploy_refuses_what_the_roles_cannot_install_yet(tmp_path: Path) -> None:
    tarball, deb = tmp_path / "slurm-24.11.5.tar.bz2", tmp_path / "slurm-smd_24.11.5-1_amd64.deb"
    tarball.write_bytes(b"")
    deb.write_bytes(b"")
    installable(parse_blueprint(GOOD))
    installable(parse_blueprint(slurm('  version: "22.05.8"\n')))
    installable(parse_blueprint(slurm('  version: "24.11.5"\n')))  # built on the lab
    installable(parse_blueprint(slurm(f'  version: "24.11.5"\n  source: {tarball}\n')))
    static = GOOD.replace("provider: {type: lab}", "provider: {type: static, ssh: {user: root}}")
    with pytest.raises(
        InputError, match=r"not yet supported: slurm.install: build \(Slurm 24\.11\.5\) outside the lab"
    ):
        installable(parse_blueprint(static + 'slurm:\n  version: "24.11.5"\n'))
    installable(
        parse_blueprint(slurm('  version: "24.11.5"\n  source: https://example.invalid/slurm-24.11.5.tar.bz2\n'))
    )
    packages = f'  version: "24.11.5"\n  install: packages\n  packages: [{deb}]\n'
    with pytest.raises(InputError, match=r"not yet supported: slurm.install: packages"):
        installable(parse_blueprint(slurm(packages)))
