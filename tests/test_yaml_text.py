"""hpckit.deploy.yaml_text: what it writes reads back as the data, in yaml.dump's layout."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hpckit.deploy.yaml_text import dump

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.sampled_from(["yes", "No", "ON", "null", "~", "", "=", "<<", "1e3", ".inf", "0x1f", "2026-11-29", "a: b"])
    | st.sampled_from(
        ["...", "---", ".x", "10.0.0.1", "1_000", "0o17", "0b11", "1:20", "+1", ".5", "1.", "gpu[001-016]", "a [b]"]
    )
    | st.sampled_from(["a #b", "-x", "? q", "x ", " x", "@a", "*a", "&a", "!a", "|", ">", "%x", "`x", "'x", '"x'])
    | st.from_regex(r"[A-Za-z_/][A-Za-z0-9_./@+=,: ()#-]{0,12}", fullmatch=True)
)
_KEYS = st.text(max_size=8) | st.integers() | st.sampled_from(["yes", "null", "a b", "k:", "-", "1.5"])
_DATA = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(_DATA)
def test_what_it_writes_reads_back_as_the_data(data: Any) -> None:
    assert yaml.safe_load(dump(data)) == data


def test_a_document_of_one_string_that_ends_documents() -> None:
    assert yaml.safe_load(dump("...")) == "..." and yaml.safe_load(dump("---")) == "---"


def test_the_layout_is_yaml_dumps() -> None:
    """Reviewers diff these files: the same block style as before (lists at their key's indent)."""
    data = {
        "all": {"hosts": {"gpu001": {"ansible_host": "10.0.0.1", "gpus": 8}}, "vars": {}},
        "files": [{"path": "files/all/etc/slurm/slurm.conf", "hosts": "gpu[001-016]", "on": True}, [1, [2, 3]]],
        "empty": [],
        "none": None,
        "ratio": 0.5,
    }
    assert dump(data) == yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=10**6).replace("'", '"')
    assert dump({"text": "two\nlines"}) == 'text: "two\\nlines"\n'  # one line, as JSON writes it
