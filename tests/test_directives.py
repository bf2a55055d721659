"""sbatch's #SBATCH reader (hpckit.slurm.directives) against the rules of Slurm's own, and the writer's
round trip through it.

The cases follow src/sbatch/opt.c of Slurm 24.11.5 (`_opt_batch_script`, `get_argument`; the same
rules in 17.x-25.x): the lab's real sbatch reads the written lines in test_jobs_lab.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpckit.slurm.directives import DirectiveError, directive_line, extra_option, quote, read_directives


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
