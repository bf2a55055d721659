"""Arrow plumbing shared by the bulk parsers: a log's lines as one Arrow array, and a kernel's
boolean answer as a numpy mask."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def text_lines(text: str) -> pa.Array:
    """The lines of ``text``, split on newlines only (as split_lines numbers them); a text that ends
    with a newline gives a last empty line."""
    lines: pa.Array = pc.list_flatten(pc.split_pattern(pa.array([text], type=pa.large_string()), pattern="\n"))
    return lines


def bool_mask(test: pa.Array) -> np.ndarray:
    """A boolean kernel's answer as a numpy mask (null reads as False)."""
    mask: np.ndarray = np.asarray(test.to_numpy(zero_copy_only=False), dtype=bool)
    return mask
