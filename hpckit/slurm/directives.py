"""`#SBATCH` lines as sbatch itself reads them, and how to write one that reads back as exactly one option.

sbatch does not hand these lines to a shell. It reads them with its own tokenizer (Slurm's
src/sbatch/opt.c: `_opt_batch_script` and `get_argument`, the same from 17.x to 25.x):

- only lines starting with `#SBATCH` (or the legacy `#SLURM`) in column 0 count, and reading stops
  at the first line that is neither blank nor a comment;
- a line whose first word is `hetjob` (or `packjob`), case-insensitive, starts the next component
  of a heterogeneous job, and that word at the start of any argument is blanked out;
- an argument is a run of non-blank characters; `'` or `"` start a quoted part that ends at the same
  quote character and may hold blanks; a backslash makes the next character literal *even inside
  quotes* (so `'a\\'b'` is the one word `a'b`, where a shell would end the quote after `a\\`);
- an unquoted, unescaped `#` ends the line (a comment);
- an argument starting with `:` or an unmatched quote makes sbatch exit (`fatal`).

`read_directives` is that reader; `directive_line` writes `--option=value` so that it reads back
whole, and checks that it does.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator

MAGIC = ("#SBATCH", "#SLURM")
_HET_SEPARATORS = ("hetjob", "packjob")


class DirectiveError(ValueError):
    """A line sbatch would refuse (sbatch exits with `fatal`), or text no #SBATCH line can carry."""


# C's isspace() in sbatch's (C) locale: these six bytes only, never a Unicode space.
_BLANKS = frozenset(" \t\n\v\f\r")


def _skip_blanks(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in _BLANKS:
        pos += 1
    return pos


def _blank_separator(line: str, pos: int) -> str:
    """get_argument's first step: `hetjob`/`packjob` as a whole word at `pos` becomes blanks."""
    for word in _HET_SEPARATORS:
        end = pos + len(word)
        if line[pos:end].lower() == word and (end == len(line) or line[end] in _BLANKS):
            return line[:pos] + " " * len(word) + line[end:]
    return line


def _arguments(line: str) -> Iterator[str]:
    """The arguments get_argument finds in what follows the magic word of one line."""
    pos = 0
    while True:
        pos = _skip_blanks(line, pos)
        line = _blank_separator(line, pos)
        pos = _skip_blanks(line, pos)
        if pos >= len(line):
            return
        if line[pos] == ":":
            raise DirectiveError(f"sbatch stops at an argument starting with ':' in {line!r}")
        word: list[str] = []
        quote = ""
        escaped = False
        while pos < len(line) and (quote or line[pos] not in _BLANKS):
            char = line[pos]
            if escaped:
                escaped = False
            elif char == "\\":
                # 24.11 takes an escaped space at once (older releases end the word there instead).
                if line[pos + 1 : pos + 2] == " ":
                    word.append(" ")
                    pos += 2
                else:
                    escaped = True
                    pos += 1
                continue
            elif quote:
                if char == quote:
                    quote = ""
                    pos += 1
                    continue
            elif char in "\"'":
                quote = char
                pos += 1
                continue
            elif char == "#":
                break  # an unquoted '#': the rest of the line is a comment
            word.append(char)
            pos += 1
        if quote:
            raise DirectiveError(f"sbatch stops at an unmatched {quote} in {line!r}")
        if word:
            yield "".join(word)
        if pos < len(line) and line[pos] == "#":
            return


def _magic(line: str) -> str | None:
    return next((m for m in MAGIC if line.startswith(m)), None)


def _is_command(line: str) -> bool:
    pos = _skip_blanks(line, 0)
    return pos < len(line) and line[pos] != "#"


def directive_lines(script: str) -> list[str]:
    """The lines sbatch takes options from: those starting with a magic word, up to the first command."""
    lines = []
    # sbatch splits the script on '\n' only (next_line), never on other line breaks.
    for line in script.split("\n"):
        if _magic(line) is not None:
            lines.append(line)
        elif _is_command(line):
            break
    return lines


def read_directives(script: str) -> list[list[str]]:
    """The arguments sbatch takes from `script`'s #SBATCH lines: one list per heterogeneous component."""
    components: list[list[str]] = [[]]
    for line in directive_lines(script):
        rest = line[len(_magic(line) or "") :]
        if _blank_separator(rest, _skip_blanks(rest, 0)) != rest:
            components.append([])
        components[-1].extend(_arguments(rest))
    return components


# Characters no #SBATCH line can carry: sbatch's line ends at '\n', its C strings at NUL. A carriage
# return or other control character reads back, but hides what the line says from anyone reading it.
_UNWRITABLE = re.compile(r"[\x00-\x1f\x7f]")


_PLAIN = re.compile(r"[A-Za-z0-9_.,:@/%+=\[\]-]+")


def quote(value: str) -> str:
    """`value` as one sbatch argument: as it is when it holds only plain characters, else in double
    quotes with a backslash before `\\` and `"`.

    Inside the quotes blanks, `'` and `#` are literal, and a backslash escapes the next character
    (in every Slurm release since 17.x), so the word reads back as exactly `value`.
    """
    bad = _UNWRITABLE.search(value)
    if bad:
        raise DirectiveError(f"{value!r} holds {bad.group()!r}, which no #SBATCH line can carry")
    if _PLAIN.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def directive_line(option: str, value: str | None = None) -> str:
    """`#SBATCH --option` or `#SBATCH --option="value"`, checked to read back as exactly that one argument."""
    if not re.fullmatch(r"[a-z][a-z0-9-]*", option):
        raise DirectiveError(f"not a long sbatch option name: {option!r}")
    line = f"#SBATCH --{option}" if value is None else f"#SBATCH --{option}={quote(value)}"
    expected = f"--{option}" if value is None else f"--{option}={value}"
    if read_directives(line) != [[expected]]:
        raise DirectiveError(f"{value!r} does not read back whole from an #SBATCH line")
    return line


# sbatch's long options (sbatch(1), Slurm 24.11), by whether they take a value: "=" required,
# "?" optional, "" none. `extra_option` lets these through a template's list of extra options; a
# template's own options (nodes, time, output ...) are refused later, by the script's writer.
_LONG_OPTIONS = {
    "=": [
        "account",
        "acctg-freq",
        "array",
        "batch",
        "begin",
        "bb",
        "bbf",
        "bell",
        "burst-buffer",
        "chdir",
        "cluster-constraint",
        "clusters",
        "comment",
        "constraint",
        "core-spec",
        "cores-per-socket",
        "cpu-freq",
        "cpus-per-gpu",
        "cpus-per-task",
        "deadline",
        "delay-boot",
        "dependency",
        "distribution",
        "extra",
        "extra-node-info",
        "gpu-bind",
        "gpu-freq",
        "gpus",
        "gpus-per-node",
        "gpus-per-socket",
        "gpus-per-task",
        "gres",
        "gres-flags",
        "hint",
        "job-name",
        "kill-on-invalid-dep",
        "licenses",
        "mail-type",
        "mail-user",
        "mcs-label",
        "mem",
        "mem-bind",
        "mem-per-cpu",
        "mem-per-gpu",
        "mincpus",
        "network",
        "nodefile",
        "nodelist",
        "nodes",
        "ntasks",
        "ntasks-per-core",
        "ntasks-per-gpu",
        "ntasks-per-node",
        "ntasks-per-socket",
        "open-mode",
        "partition",
        "power",
        "prefer",
        "priority",
        "profile",
        "qos",
        "reservation",
        "signal",
        "sockets-per-node",
        "switches",
        "thread-spec",
        "threads-per-core",
        "time",
        "time-min",
        "tmp",
        "tres-bind",
        "tres-per-task",
        "wckey",
        "exclude",
    ],
    "?": ["exclusive", "nice", "no-kill", "propagate"],
    "": ["contiguous", "no-requeue", "overcommit", "oversubscribe", "requeue", "reboot", "spread-job", "use-min-nodes"],
}
_KINDS = {name: kind for kind, names in _LONG_OPTIONS.items() for name in names}
# Options that change who runs the job, what it runs, where its input and output go or how sbatch
# itself behaves: never through a list of extras.
_REFUSED = {
    "uid": "it runs the job as another user",
    "gid": "it runs the job as another group",
    "wrap": "it replaces the script",
    "container": "it runs the script in another image",
    "container-id": "it runs the script in another image",
    "export": "it changes the job's environment (use the env parameter)",
    "export-file": "it changes the job's environment (use the env parameter)",
    "get-user-env": "it loads another login environment",
    "input": "it changes the script's input",
    "output": "the template names the output file (log_dir)",
    "error": "the template names the output file (log_dir)",
    "hold": "use `hpckit submit --hold`",
    "parsable": "hpckit reads sbatch's answer itself",
    "test-only": "use `hpckit submit --test-only`",
    "wait": "use `hpckit submit --wait`",
    "ignore-pbs": "it changes how sbatch reads the script",
    "het-group": "heterogeneous jobs are not supported by the templates",
}


def extra_option(word: str) -> tuple[str, str | None]:
    """`--name[=value]` from a list of extra sbatch options: (name, value), or DirectiveError saying why not."""
    if not word.startswith("--"):
        raise DirectiveError("is not a long sbatch option (--name=value); write short options in their long form")
    name, sep, value = word[2:].partition("=")
    if name in _REFUSED:
        raise DirectiveError(f"--{name} is not allowed here: {_REFUSED[name]}")
    kind = _KINDS.get(name)
    if kind is None:
        close = difflib.get_close_matches(name, list(_KINDS), n=1)
        raise DirectiveError(f"--{name} is not an sbatch option" + (f"; did you mean --{close[0]}?" if close else ""))
    if kind == "=" and not sep:
        raise DirectiveError(f"--{name} needs a value: --{name}=VALUE")
    if kind == "" and sep:
        raise DirectiveError(f"--{name} takes no value")
    return name, value if sep else None
