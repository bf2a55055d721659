"""sbatch's #SBATCH reader (hpckit.slurm.directives) against the rules of Slurm's own, and the writer's
round trip through it.

The cases follow src/sbatch/opt.c of Slurm 24.11.5 (`_opt_batch_script`, `get_argument`; the same
rules in 17.x-25.x): the lab's real sbatch reads the written lines in test_jobs_lab.py.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpckit.slurm.directives import DirectiveError, directive_line, extra_option, quote, read_directives
from tests.hostile import CORPUS


@pytest.mark.parametrize(
    ("line", "args"),
    [
        ("#SBATCH --job-name='a b'", ["--job-name=a b"]),
        # a backslash escapes the next character even inside single quotes (a shell would keep it)
        ("#SBATCH -J 'it\\'s'", ["-J", "it's"]),
        ("#SBATCH -J 'a\\\\'", ["-J", "a\\"]),
        ("#SBATCH --comment=a#b", ["--comment=a"]),  # an unquoted '#' starts a comment
        ('#SBATCH --comment="a#b"', ["--comment=a#b"]),
        ("#SBATCH --comment=a\\ b", ["--comment=a b"]),
        ("#SBATCH --comment=a\\#b c", ["--comment=a#b", "c"]),
        ("#SBATCH\t-N 2   -n4", ["-N", "2", "-n4"]),
        ("#SBATCH --comment=a\u00a0b", ["--comment=a\u00a0b"]),  # not a blank to C's isspace()
        ("#SBATCH --comment=\"x\" --x='y'z", ["--comment=x", "--x=yz"]),
        ("#SLURM -N 3", ["-N", "3"]),  # the legacy magic word
        ("#SBATCH", []),
    ],
)
def test_reader_follows_sbatchs_rules(line: str, args: list[str]) -> None:
    assert read_directives(f"#!/bin/bash\n{line}\n") == [args]


def test_reading_stops_at_the_first_command_only() -> None:
    script = "#!/bin/bash\n\n# a comment\n  # indented comment\n #SBATCH -N 9\n#SBATCH -N 2\necho hi\n#SBATCH -N 3\n"
    assert read_directives(script) == [["-N", "2"]]  # ' #SBATCH' is a comment, not a directive


def test_hetjob_separates_components_and_is_blanked_only_as_a_word() -> None:
    script = "#!/bin/bash\n#SBATCH -N 1\n#SBATCH hetjob\n#SBATCH -N 2 packjob -n 4\n#SBATCH --comment=hetjobs\n"
    assert read_directives(script) == [["-N", "1"], ["-N", "2", "-n", "4", "--comment=hetjobs"]]
    assert read_directives("#SBATCH HETJOB -N 5\n") == [[], ["-N", "5"]]


@pytest.mark.parametrize("line", ["#SBATCH --comment='open", '#SBATCH -J "a\\"', "#SBATCH : -N 2", "#SBATCH -N 2 :x"])
def test_lines_sbatch_refuses(line: str) -> None:
    with pytest.raises(DirectiveError):
        read_directives(line + "\n")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\n"), max_size=40))
def test_any_single_line_text_reads_back_whole(value: str) -> None:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        with pytest.raises(DirectiveError, match="no #SBATCH line can carry"):
            quote(value)
        return
    assert read_directives(directive_line("comment", value)) == [[f"--comment={value}"]]


def test_plain_values_are_written_bare_and_others_quoted() -> None:
    assert directive_line("nodes", "4") == "#SBATCH --nodes=4"
    assert directive_line("exclusive") == "#SBATCH --exclusive"
    assert directive_line("job-name", "a b") == '#SBATCH --job-name="a b"'
    assert directive_line("job-name", 'q"\\') == '#SBATCH --job-name="q\\"\\\\"'
    with pytest.raises(DirectiveError, match="not a long sbatch option"):
        directive_line("N", "2")


@pytest.mark.parametrize(
    ("word", "message"),
    [
        ("-A evil", "not a long sbatch option"),
        ("--uid=0", "runs the job as another user"),
        ("--wrap=id", "replaces the script"),
        ("--export=ALL", "use the env parameter"),
        ("--output=/x", "log_dir"),
        ("--constrant=a100", "did you mean --constraint"),
        ("--mail-type", "needs a value"),
        ("--requeue=yes", "takes no value"),
    ],
)
def test_extra_options_are_checked(word: str, message: str) -> None:
    with pytest.raises(DirectiveError, match=message):
        extra_option(word)
    assert extra_option("--constraint=a100&ib") == ("constraint", "a100&ib")
    assert extra_option("--exclusive") == ("exclusive", None) and extra_option("--nice=5") == ("nice", "5")


# --- the real sbatch as the oracle ----------------------------------------------------------------------

# sbatch parses the script before it contacts a controller; with -vvvv it prints every argument it found
# ("debug2: Found in script, argument ...") or its fatal error. A last directive it does not know makes
# it stop there ("Invalid directive found"), and the controller it is given (port 1 of localhost) is
# never there: nothing is submitted anywhere.
_SLURM_CONF = "ClusterName=parse\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\n"
_SLURM_CONF += "NodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=n1 Default=YES\n"
_FOUND = re.compile(r'^sbatch: debug2: Found in script, argument "(.*)"$')
_STOP = "--hpckit-stops-sbatch-here"


def _sbatch_reads(script: str, tmp: Path) -> list[str] | str:
    """The arguments the installed sbatch takes from `script`, or its fatal message."""
    (tmp / "slurm.conf").write_text(_SLURM_CONF)
    (tmp / "job.sh").write_text(script.replace("\ntrue\n", f"\n#SBATCH {_STOP}\ntrue\n"))
    env = {**os.environ, "SLURM_CONF": str(tmp / "slurm.conf")}
    done = subprocess.run(
        ["sbatch", "-vvvv", "--hold", str(tmp / "job.sh")], capture_output=True, text=True, env=env, timeout=20
    )
    fatal = [line for line in done.stderr.splitlines() if line.startswith("sbatch: fatal:")]
    if fatal and "configuration" in fatal[0]:
        pytest.skip(f"sbatch cannot run here: {fatal[0]}")
    found = [m.group(1) for line in done.stderr.splitlines() if (m := _FOUND.match(line))]
    if fatal and "line" in fatal[0]:
        return fatal[0]
    assert found[-1:] == [_STOP], done.stderr
    return found[:-1]


ORACLE_LINES = [
    "#SBATCH --job-name='a b' --comment=\"c'd\"",
    "#SBATCH -J 'it\\'s' --comment=x#y",
    '#SBATCH --comment=\'a\\\\\' --comment="q\\""',
    '#SBATCH --comment="a#b" --comment=c\\#d',
    "#SBATCH --comment=unicodé\u00a0✓",
    "#SBATCH --comment='open",
    "#SBATCH : -N 2",
]


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="sbatch is not installed (slurm-client)")
def test_the_reader_agrees_with_the_installed_sbatch(tmp_path: Path) -> None:
    """Hand-picked lines, the hostile corpus as `directive_line` writes it, and the same values quoted
    for a shell (the hole): the installed sbatch reads each exactly as `read_directives` does; it takes
    options out of shell-quoted values, and never out of ours."""
    lines = [(line, None) for line in ORACLE_LINES]
    for payload in CORPUS:
        value = payload.format(m="/tmp/m")
        lines += [(directive_line("comment", value), value), (f"#SBATCH --comment={shlex.quote(value)}", None)]
    shell_quoted_injections = 0
    for line, written in lines:
        script = f"#!/bin/bash\n{line}\ntrue\n"
        real = _sbatch_reads(script, tmp_path)
        try:
            ours: list[str] | str = [arg for component in read_directives(script) for arg in component]
        except DirectiveError:
            assert isinstance(real, str), (line, real)
            continue
        assert real == ours, line
        if written is not None:
            assert real == [f"--comment={written}"], line
        elif {"--account=evil", "--qos=evil"} & set(real):
            shell_quoted_injections += 1
    assert shell_quoted_injections >= 2
