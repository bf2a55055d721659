"""The hostile corpus: text values that try to add an sbatch option or run a command, for every text
parameter of every template (rendered and executed in test_templates.py, submitted to the real sbatch
in test_jobs_lab.py).

`{m}` is where a payload names its marker file: a command that ran would create it.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from hpckit.errors import InputError
from hpckit.jobs.library import Rendered, Template

# Each tries something different against the shell, sbatch's #SBATCH reader or an option parser.
CORPUS = [
    # the shell: substitution, separators, quotes of both kinds
    "$(touch {m})",
    "`touch {m}`",
    "; touch {m}",
    "x' ; touch {m} ; '",
    'x" ; touch {m} ; "',
    "&& touch {m} #",
    "$(touch {m})'\"`touch {m}`",
    # sbatch's reader: a backslash escapes even inside quotes, so these end a shell-quoted word early
    # (the first two add --account/--qos past shell quoting; the others make sbatch stop)
    "x\\'\"'\" --account=evil --comment=INJECTED \\'",
    "\\'\"'\" --qos=evil --comment=INJECTED \\'",
    "x\\' --account=evil --comment=INJECTED \\'",
    'x\\" --account=evil --comment=INJECTED \\"',
    "trailing backslash \\",
    "\\\\' --qos=evil '",
    # #SBATCH text, comments, heterogeneous-job separators, leading ':' and '-'
    "#SBATCH --account=evil",
    "x #SBATCH --comment=INJECTED",
    "hetjob --account=evil",
    "x hetjob --comment=INJECTED",
    ": --account=evil",
    "--account=evil",
    "-A evil --wrap='touch {m}'",
    # Slurm's own patterns and shell globbing
    "%j %x %% * ~root $HOME",
    # Unicode: letters, a no-break space (a blank to Python, not to C's isspace), emoji
    "ünïcødé ✓ 名前",
    "a\u00a0b --comment=INJECTED",
    "rocket \U0001f680",
]
# Text no parameter may hold: each is refused before anything is rendered, naming the parameter.
REFUSED = ["a\nb", "a\rb", "a\x00b", "a\x1bb", "a\u2028b", "a\u202eb", "a\x85b", "a\udcffb"]

TEXT_TYPES = {"str", "path", "args", "env", "sbatch_options"}


def as_value(spec_type: str, payload: str) -> str:
    """The payload as text for a parameter of this type: one word for `args`, a setting for `env`,
    an option's value for `sbatch_options`."""
    if spec_type == "args":
        return shlex.quote(payload)
    if spec_type == "env":
        return shlex.quote(f"HOSTILE={payload}")
    if spec_type == "sbatch_options":
        return shlex.quote(f"--comment={payload}")
    return payload


def render_hostile(
    template: Template, payload: str, fixed: dict[str, str], marker: Callable[[str], str]
) -> tuple[Rendered, dict[str, str], dict[str, str]]:
    """The template with the payload in every text parameter not in `fixed`.

    A parameter that refuses the payload is set back to its default; the refusal must name it. Returns
    the rendered script, the values used, and {parameter: error} for those refused.
    """
    values = dict(fixed)
    for name, spec in template.params.items():
        if spec.type in TEXT_TYPES and not spec.pattern and name not in fixed:
            values[name] = as_value(spec.type, payload.format(m=marker(name)))
    refused: dict[str, str] = {}
    while True:
        try:
            return template.render(values), values, refused
        except InputError as exc:
            culprit = next((n for n in values if n not in fixed and f"parameter {n}:" in str(exc)), None)
            assert culprit is not None, f"{template.name}: a refusal that names no parameter: {exc}"
            refused[culprit] = str(exc)
            del values[culprit]
