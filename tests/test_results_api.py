"""Kind detection, the parse_text/parse_file front door, ParseError and the derived figures."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from hpckit.results import (
    ParseError,
    dense_flops_per_token,
    detect_kind,
    mfu,
    parse_file,
    parse_text,
    peak_busbw,
    tflops_per_gpu,
    tokens_per_second,
)

DATA = Path(__file__).parent / "data" / "results"

EXPECTED_KIND = {
    "all_": "nccl-tests",
    "handmade-nccl-tests-J": "nccl-tests-json",
    "handmade-nccl": "nccl-tests",
    "nemo1": "nemo1",
    "nemo2": "nemo2",
    "megatron": "megatron",
    "sacct-": "sacct",
    "handmade-sacct-json": "sacct-json",
    "issue-nccl-tests": "nccl-tests",
    "issue-cluster_utils-87-sacct": "sacct",
}


def _expected(name: str) -> str:
    return next(kind for prefix, kind in EXPECTED_KIND.items() if name.startswith(prefix))


@pytest.mark.parametrize("path", sorted(p for p in DATA.iterdir() if p.suffix in (".txt", ".json")), ids=str)
def test_detect_kind_of_every_sample(path: Path) -> None:
    assert detect_kind(path.read_text()) == _expected(path.name)
    assert parse_file(path).kind == _expected(path.name)


def test_parse_error_carries_where_and_what() -> None:
    err = ParseError("f.log", 12, "  12 34 x", "bad row")
    assert str(err) == "f.log:12: bad row"
    assert (err.source, err.lineno, err.line, err.message) == ("f.log", 12, "  12 34 x", "bad row")
    assert isinstance(err, ValueError)


def test_unknown_text_and_unknown_kind() -> None:
    with pytest.raises(ParseError, match=r"^<text>:1: cannot tell what this is"):
        parse_text("just some words\n")
    with pytest.raises(ParseError, match=r"unknown kind 'ior'"):
        parse_text("x", kind="ior")


def test_missing_file_is_a_parse_error(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match=r"cannot read"):
        parse_file(tmp_path / "nope.txt")


def test_undecodable_bytes_do_not_stop_parsing(tmp_path: Path) -> None:
    raw = (DATA / "all_reduce-modern-2node-16gpu-a100-mpijob.txt").read_bytes()
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"\xff\xfe garbage \xe9\n" + raw)
    assert len(parse_file(path).frame) == 4


def test_peak_busbw_prefers_sizes_from_one_gib() -> None:
    frame = pd.DataFrame(
        {
            "size_bytes": [1 << 20, 1 << 30, 1 << 31, 1 << 31],
            "busbw_gbps": [500.0, 300.0, 320.0, 321.0],  # a small-size outlier must not win
            "placement": ["out", "out", "out", "in"],
        }
    )
    assert peak_busbw(frame) == 321.0
    with pytest.raises(ValueError):
        peak_busbw(frame.iloc[0:0])


def test_throughput_and_mfu() -> None:
    # llama3-8b on 8 GPUs, GBS 128 x 8192 tokens in 6.071 s (the NeMo 2 b200 sample's step time)
    tps = tokens_per_second(6.071, 128, 8192, num_gpus=8)
    assert math.isclose(tps, 128 * 8192 / 6.071 / 8)
    flops = dense_flops_per_token(8.03e9, n_layers=32, hidden_size=4096, seq_length=8192)
    assert flops == 6 * 8.03e9 + 12 * 32 * 4096 * 8192
    tflops = tflops_per_gpu(6.071, 128 * 8192, 8, flops)
    # the log reports ~1250 TFLOP/s per GPU; NeMo counts FLOPs layer by layer, 6N + attention is close
    assert abs(tflops - 1250) / 1250 < 0.1
    assert mfu(tflops, 2250.0) == pytest.approx(tflops / 2250.0)
    with pytest.raises(ValueError):
        mfu(100.0, 0.0)
    with pytest.raises(ValueError):
        tokens_per_second(0.0, 1, 1)
