"""Line plumbing shared by the text parsers: launcher prefixes, numbered lines, a log's lines as an
Arrow array (for the fast paths) and Python regexes spelt for RE2 (Arrow's regex kernels)."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Launchers put a rank tag in front of every line; each form carries the rank in a different group:
#   mpirun --tag-output   "[1,3]<stdout>:"      torchrun/torch.distributed.run "[default3]:"
#   srun -l               "  3: " (right-aligned, may be "0:" alone on an empty line)
PREFIX_RE = re.compile(r"\[\d+,(\d+)\]<std(?:out|err)>:|\[default(\d+)\]:|[ \t]*(\d+):(?:[ \t]|$)")


def strip_prefix(line: str) -> tuple[str, int]:
    """(line without its launcher prefix, rank tag or -1)."""
    # cheap gate first: a prefix starts with '[' or has its ':' within the first few characters
    if line[:1] != "[" and line.find(":", 0, 10) < 0:
        return line, -1
    m = PREFIX_RE.match(line)
    if m is None:
        return line, -1
    tag = m.group(1) or m.group(2) or m.group(3)
    return line[m.end() :], int(tag)


def split_lines(text: str) -> list[str]:
    """Lines split on newlines only, so that line numbers match what an editor shows."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def excerpt(line: str, limit: int = 160) -> str:
    """A line short enough for an error message."""
    line = line.rstrip("\r\n")
    return line if len(line) <= limit else line[: limit - 3] + "..."


# ---------------------------------------------------------------- a log's lines in Arrow
# Arrow plumbing shared by the bulk parsers: a log's lines as one Arrow array, and a kernel's
# boolean answer as a numpy mask.


def text_lines(text: str) -> pa.Array:
    """The lines of ``text``, split on newlines only (as split_lines numbers them); a text that ends
    with a newline gives a last empty line."""
    lines: pa.Array = pc.list_flatten(pc.split_pattern(pa.array([text], type=pa.large_string()), pattern="\n"))
    return lines


def bool_mask(test: pa.Array) -> np.ndarray:
    """A boolean kernel's answer as a numpy mask (null reads as False)."""
    mask: np.ndarray = np.asarray(test.to_numpy(zero_copy_only=False), dtype=bool)
    return mask


# ---------------------------------------------------------------- regexes spelt for RE2
# Python regexes spelt for RE2 (Arrow's regex kernels) so that both match the same text.
#
# RE2's \d, \s and \w are ASCII-only; Python's, on str, are Unicode (str.isdecimal, str.isspace).
# Spelling \d and \s out as explicit classes makes RE2 read them as Python does on any text.

# Exactly the characters str.strip() removes (str.isspace), so that Arrow trims as Python does.
PY_WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
PY_WHITESPACE += "\u2028\u2029\u202f\u205f\u3000"
# What Python's \d matches in str patterns (str.isdecimal, Unicode category Nd), as code point runs.
PY_DECIMAL_RUNS: tuple[tuple[int, int], ...] = (
    (0x30, 0x39),
    (0x660, 0x669),
    (0x6F0, 0x6F9),
    (0x7C0, 0x7C9),
    (0x966, 0x96F),
    (0x9E6, 0x9EF),
    (0xA66, 0xA6F),
    (0xAE6, 0xAEF),
    (0xB66, 0xB6F),
    (0xBE6, 0xBEF),
    (0xC66, 0xC6F),
    (0xCE6, 0xCEF),
    (0xD66, 0xD6F),
    (0xDE6, 0xDEF),
    (0xE50, 0xE59),
    (0xED0, 0xED9),
    (0xF20, 0xF29),
    (0x1040, 0x1049),
    (0x1090, 0x1099),
    (0x17E0, 0x17E9),
    (0x1810, 0x1819),
    (0x1946, 0x194F),
    (0x19D0, 0x19D9),
    (0x1A80, 0x1A89),
    (0x1A90, 0x1A99),
    (0x1B50, 0x1B59),
    (0x1BB0, 0x1BB9),
    (0x1C40, 0x1C49),
    (0x1C50, 0x1C59),
    (0xA620, 0xA629),
    (0xA8D0, 0xA8D9),
    (0xA900, 0xA909),
    (0xA9D0, 0xA9D9),
    (0xA9F0, 0xA9F9),
    (0xAA50, 0xAA59),
    (0xABF0, 0xABF9),
    (0xFF10, 0xFF19),
    (0x104A0, 0x104A9),
    (0x10D30, 0x10D39),
    (0x11066, 0x1106F),
    (0x110F0, 0x110F9),
    (0x11136, 0x1113F),
    (0x111D0, 0x111D9),
    (0x112F0, 0x112F9),
    (0x11450, 0x11459),
    (0x114D0, 0x114D9),
    (0x11650, 0x11659),
    (0x116C0, 0x116C9),
    (0x11730, 0x11739),
    (0x118E0, 0x118E9),
    (0x11950, 0x11959),
    (0x11C50, 0x11C59),
    (0x11D50, 0x11D59),
    (0x11DA0, 0x11DA9),
    (0x16A60, 0x16A69),
    (0x16AC0, 0x16AC9),
    (0x16B50, 0x16B59),
    (0x1D7CE, 0x1D7FF),
    (0x1E140, 0x1E149),
    (0x1E2F0, 0x1E2F9),
    (0x1E950, 0x1E959),
    (0x1FBF0, 0x1FBF9),
)

# What Python's \s matches in ASCII text (str.isspace: \t-\r and \x1c-\x1f too); RE2's is narrower.
_SPACE, _NOT_SPACE = r"[\t-\r\x1c- ]", r"[^\t-\r\x1c- ]"
# lookarounds and back-references (RE2 has none), escaped backslashes (which would hide what
# follows them from the replacements below), \Z \A \G, and \s / \S inside a class
_RE2_UNSURE = re.compile(r"\(\?<[=!]|\(\?P=|\\\\|\\[ZAG]|\[[^\]]*\\[sS]")
# classes that differ between the engines beyond ASCII and are not spelt out here, and \d or \D
# inside a class (RE2 would read it as ASCII digits)
_NOT_UNICODE = re.compile(r"\\[wWbB]|\[[^\]]*\\[dD]")


def re2_ascii(pattern: str) -> str | None:
    """A Python regex as RE2 must be written to match the same on ASCII text, or None when that is
    not sure (lookbehind, back-references, \\s inside a class ...).  On ASCII text \\d, \\w, \\b and
    "." already agree; only \\s and \\S need spelling out."""
    if _RE2_UNSURE.search(pattern):
        return None
    return pattern.replace(r"\S", _NOT_SPACE).replace(r"\s", _SPACE)


def _class_body(chars: str, runs: tuple[tuple[int, int], ...]) -> str:
    singles = "".join(f"\\x{{{ord(c):X}}}" for c in chars)
    return singles + "".join(f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in runs)


_U_SPACE = _class_body(PY_WHITESPACE, ())
_U_DIGIT = _class_body("", PY_DECIMAL_RUNS)


def re2_unicode(pattern: str) -> str | None:
    """The same for any text: \\d, \\D, \\s and \\S spelt as Python's Unicode classes; None for
    what cannot be spelt that way here (\\w, \\b and the cases re2_ascii refuses)."""
    if _RE2_UNSURE.search(pattern) or _NOT_UNICODE.search(pattern):
        return None
    table = {"d": f"[{_U_DIGIT}]", "D": f"[^{_U_DIGIT}]", "s": f"[{_U_SPACE}]", "S": f"[^{_U_SPACE}]"}
    return re.sub(r"\\([dDsS])", lambda m: table[m.group(1)], pattern)
