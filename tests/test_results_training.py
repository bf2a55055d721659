"""NeMo 1 (tqdm), NeMo 2 and Megatron logs on the real samples."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from hpckit.results import ParseError, parse_file, parse_text, steady_step_time, training
from hpckit.results.training_fields import MEGATRON_LINE, NEMO2_LINE
from tests.resultsutil import fast_and_exact

DATA = Path(__file__).parent / "data" / "results"


def test_nemo2_b200_scientific_tflops() -> None:
    r = parse_file(DATA / "nemo2-b200-llama3-8b-pretrain-iterations-45-49.txt")
    f = r.frame
    assert r.kind == "nemo2" and not r.partial
    assert list(f["step"]) == [45, 46, 47, 48, 49]
    assert list(f["tflops_per_gpu"]) == [1249.0, 1252.0, 1248.0, 1250.0, 1253.0]  # 1.249e+03 ...
    assert f["step_time_s"][0] == 6.08 and f["global_batch_size"][0] == 128
    assert f["consumed_samples"].iloc[-1] == 6400
    assert f["max_memory_reserved_bytes"][0] == 127785762816
    assert r.meta["units"]["tflops_per_gpu"] == "TFLOP/s"  # type: ignore[index]
    assert steady_step_time(f) == 6.071  # 5 steps only: all of them
    assert steady_step_time(f, skip=2) == 6.071  # median of 6.082, 6.071, 6.06


def test_nemo2_aws_plain_tflops() -> None:
    f = parse_file(DATA / "nemo2-aws-llama3-iterations-74-76-excerpt.txt").frame
    assert list(f["step"]) == [74, 75, 76] and list(f["tflops_per_gpu"]) == [865.7, 867.7, 866.9]
    assert f["lr"][2] == 1.154e-05


def test_nemo1_log_tail_takes_global_step() -> None:
    r = parse_file(DATA / "nemo1-a3mega-llama2-7b-log-tail.txt")
    f = r.frame
    assert r.kind == "nemo1" and len(f) == 1
    assert f["step"][0] == 5 and f["batch"][0] == 7 and f["total_steps"][0] == 15
    assert f["step_time_s"][0] == 49.5 and f["loss"][0] == 11.5 and f["consumed_samples"][0] == 12288


def test_nemo1_pager_carriage_returns_and_val_loss() -> None:
    f = parse_file(DATA / "nemo1-peft-tqdm-carriage-returns-early-stop-excerpt.txt").frame
    assert len(f) == 1
    assert f["step"][0] == 6023 and f["val_loss"][0] == 0.0917 and f["step_time_s"][0] == 2.59


def test_nemo1_one_row_per_step_from_tqdm_refreshes() -> None:
    line = (DATA / "nemo1-tqdm-final-step-lines-dgxc-benchmarking.txt").read_text().splitlines()[1]
    refreshes = []
    for n in (1, 1, 2, 2, 3):
        refreshes.append(
            line.replace("100/100", f"{n}/100")
            .replace("global_step=99.00", f"global_step={n - 1}.000")
            .replace("consumed_samples=25600.0", f"consumed_samples={256.0 * n}")
        )
    r = parse_text("\r".join(refreshes) + "\n", "nemo1")
    assert list(r.frame["step"]) == [0, 1, 2] and r.warnings == []


def test_nemo1_steps_from_different_runs_are_flagged() -> None:
    r = parse_file(DATA / "nemo1-tqdm-final-step-lines-dgxc-benchmarking.txt")
    # three READMEs: steps 49, 99 and 99 again from another model
    assert list(r.frame["step"]) == [49, 99]
    assert r.frame["step_time_s"].tolist() == [24.0, 11.2]
    assert "logged again with different values" in r.warnings[0]


def test_megatron_bridge_timestamp_and_memory() -> None:
    r = parse_file(DATA / "megatron-bridge-2025-10-iteration-timestamp-memory.txt")
    f = r.frame
    assert r.kind == "megatron" and len(f) == 1
    assert f["step"][0] == 10 and math.isclose(f["step_time_s"][0], 4.6478)
    assert f["loss"][0] == 9.763827 and f["grad_norm"][0] == 33.055
    assert str(f["timestamp"][0]) == "2025-10-06 03:27:07"
    assert r.meta["memory_mb"] == {  # the [Rank 0] memory line
        "allocated_mb": 9554.87939453125,
        "max_allocated_mb": 12003.60400390625,
        "reserved_mb": 12232.0,
        "max_reserved_mb": 12232.0,
    }


def test_megatron_srun_l_prefix_tokens_and_suffixes() -> None:
    f = parse_file(DATA / "megatron-lm-srun-l-prefix-eta-tokens-per-sec-gpu.txt").frame
    assert f["step"][0] == 300 and f["tflops_per_gpu"][0] == 412.3
    assert f["tokens_per_s_per_gpu"][0] == 8000.5
    assert f["consumed_tokens"][0] == 1.258e9  # "1.258B"
    assert f["eta_s"][0] == 0.0 and math.isclose(f["step_time_s"][0], 131.0641)


def test_megatron_deepspeed_default_prefix() -> None:
    f = parse_file(DATA / "megatron-deepspeed-bigscience-default7-prefix-line.txt").frame
    assert f["step"][0] == 2 and f["tflops_per_gpu"][0] == 48.77
    assert f["samples_per_s"][0] == 35.888 and f["seq_length"][0] == 2048
    assert math.isclose(f["loss"][0], 11.19602)


def test_megatron_deepspeed_tgs() -> None:
    f = parse_file(DATA / "megatron-deepspeed-style-tgs-lines.txt").frame
    assert list(f["step"]) == [5, 6]
    assert list(f["tokens_per_s_per_gpu"]) == [142.612, 141.518]
    assert list(f["tflops_per_gpu"]) == [153.38, 152.20]


def test_megatron_bert_current_time_and_validation() -> None:
    r = parse_file(DATA / "megatron-lm-2024-bert-current-time-timers-validation.txt")
    assert r.frame["wall_time"][0] == 1706860208.35 and r.frame["skipped_iterations"][0] == 1
    assert r.meta["validation"] == [{"step": 1, "lm_loss": 0.4280033, "lm_loss_ppl": 1.534191}]


def test_truncated_last_step_line_is_partial() -> None:
    text = (DATA / "nemo2-b200-llama3-8b-pretrain-iterations-45-49.txt").read_text()
    r = parse_text(text[: text.rindex("TFLOPS_per_GPU")], "nemo2")
    assert r.partial and len(r.frame) == 5
    assert "truncated" in r.warnings[0] and math.isnan(r.frame["tflops_per_gpu"].iloc[-1])


def test_unreadable_value_is_flagged() -> None:
    text = (DATA / "nemo2-aws-llama3-iterations-74-76-excerpt.txt").read_text().replace("8.748", "8.7x8")
    r = parse_text(text, "nemo2")
    assert r.partial and "line 2: unreadable step_time_s" in r.warnings[0]


def test_no_step_lines_is_an_error() -> None:
    with pytest.raises(ParseError, match=r"^log:1: no megatron step lines"):
        parse_text("training ...\n", "megatron", source="log")


def test_steady_step_time_skips_warmup() -> None:
    lines = [
        f"Training epoch 0, iteration {i}/20 | train_step_timing in s: {t}"
        for i, t in enumerate([30.0, 9.0, 6.2, 6.1, 6.0, 6.1, 6.2, 6.0, 6.1, 6.3])
    ]
    f = parse_text("\n".join(lines), "nemo2").frame
    assert steady_step_time(f) == 6.1  # median of the last 5
    assert steady_step_time(f, skip=0) == 6.15  # the warm-up steps pull it up
    with pytest.raises(ValueError):
        steady_step_time(f, skip=-1)


# ---------------------------------------------------------------- the bulk path agrees with the exact one


def _shift(pattern: str, text: str, by: int) -> str:
    """`pattern` has two groups, a label and a number: move every such number on by `by`."""
    return re.sub(pattern, lambda m: f"{m.group(1)}{int(m.group(2)) + by}", text)


def _stretch(text: str, pattern: str, times: int = 80) -> str:
    """A long log from a short sample: its step lines again and again, step numbers moved on."""
    lines = [ln for ln in text.split("\n") if re.search(pattern, ln)]
    return "\n".join(_shift(pattern, ln, 1000 * k) for k in range(times) for ln in lines) + "\n"


PIPE_SAMPLES = sorted(p.name for p in DATA.iterdir() if p.name.startswith(("nemo2", "megatron")))
TQDM_SAMPLES = sorted(p.name for p in DATA.iterdir() if p.name.startswith("nemo1"))


@pytest.mark.parametrize("name", PIPE_SAMPLES + TQDM_SAMPLES)
def test_bulk_and_exact_training_readers_agree(name: str) -> None:
    """Every real sample, made long: the fast path reads it (it must answer, or this fails when
    the fast path stops running) and says what the exact parser says."""
    kind = name.split("-", 1)[0]
    text = (DATA / name).read_text()
    if kind == "nemo1":
        long = "\r".join(_shift(r"(global_step=)(\d+)", text, 10**5 * k) for k in range(80))
    else:
        long = _stretch(text, r"(iteration\s+)(\d+)")
    _, ran = fast_and_exact(long, kind)
    path = "tqdm-steps" if kind == "nemo1" else "pipe-steps"
    declined = name in FAST_DECLINED
    assert bool(ran[path]) != declined, "a declined shape was read fast" if declined else "the fast path did not run"


# samples the fast path declines, by design (rare shapes: the exact parser reads them)
FAST_DECLINED = {
    "nemo1-peft-tqdm-carriage-returns-early-stop-excerpt.txt": "a pager's redraws (^M)",
}


def test_bulk_path_steps_aside_for_a_second_layout() -> None:
    text = _stretch((DATA / "nemo2-b200-llama3-8b-pretrain-iterations-45-49.txt").read_text(), r"(iteration )(\d+)")
    odd = text.replace("| lr:", "| learning rate:", 1)  # one line of another layout
    assert training.bulk_pipe(odd, NEMO2_LINE, str.lower) is None  # declines: the exact parser reads it
    assert len(parse_text(odd, "nemo2").frame) == 400


# ---------------------------------------------------------------- the fast paths pick what the exact parser reads

B200 = "nemo2-b200-llama3-8b-pretrain-iterations-45-49.txt"
A3MEGA = "nemo1-a3mega-llama2-7b-log-tail.txt"


def _same(text: str, kind: str) -> None:
    fast_and_exact(text, kind)


def _python_step_lines(text: str, marker: re.Pattern[str]) -> tuple[list[str], list[int]]:
    """The step lines as the exact parser picks them (and their numbers)."""
    picked = [(i + 1, ln) for i, ln in enumerate(text.split("\n")) if "iteration" in ln and "|" in ln]
    found = [(n, ln) for n, ln in picked if marker.search(ln)]
    return [ln for _, ln in found], [n for n, _ in found]


def test_python_whitespace_is_what_str_strip_removes() -> None:
    assert set(training.PY_WHITESPACE) == {chr(c) for c in range(0x110000) if chr(c).isspace()}


def test_re2_spelling_of_markers() -> None:
    from hpckit.results.lines import re2_ascii

    assert re2_ascii(NEMO2_LINE.pattern) is not None
    assert re2_ascii(MEGATRON_LINE.pattern) is not None  # (no lookbehind: RE2 picks Megatron's lines too)
    assert re2_ascii(r"[\s]x") is None and re2_ascii(r"(?<!a)x") is None


@pytest.mark.parametrize("blank", [" ", "\t", "\x0b", "\x0c", "\x1c", "\x1f", "  \x1e "])
def test_arrow_and_python_pick_the_same_step_lines(blank: str) -> None:
    text = _stretch((DATA / B200).read_text(), r"(iteration\s+)(\d+)")
    lines = text.split("\n")
    lines[7] = lines[7].replace("iteration ", f"iteration{blank}", 1)  # Python's \s, not RE2's
    lines[9] = lines[9].replace("epoch 0", f"epoch{blank}0", 1)
    lines.insert(3, "| iteration 5/9 | not a step line")
    odd = "\n".join(lines)
    arrow = training._step_lines_arrow(odd, NEMO2_LINE)
    assert arrow is not None
    assert (arrow[0].to_pylist(), arrow[1].tolist()) == _python_step_lines(odd, NEMO2_LINE)
    assert arrow[2] == [(4, "| iteration 5/9 | not a step line")]


def test_nemo2_labels_with_other_blanks_agree() -> None:
    text = _stretch((DATA / B200).read_text(), r"(iteration\s+)(\d+)")
    lines = text.split("\n")
    lines[5] = lines[5].replace("| lr:", "|\x1clr \t:", 1)  # strips to the same label
    lines[6] = lines[6].replace("| global_step: ", "| global_step:\xa0", 1)  # and the same value
    _same("\n".join(lines), "nemo2")


def _tqdm_log(refresh: str, steps: int, redraws: int) -> str:
    """`redraws` copies of each step's refresh, carriage-return separated, a newline every 50 steps."""
    out = []
    for k in range(steps):
        one = re.sub(r"global_step=[\d.]+", f"global_step={k}.0", refresh)
        one = re.sub(r"consumed_samples=[\d.]+", f"consumed_samples={2048 * (k + 1)}.0", one)
        out.append("\r".join([one] * redraws) + ("\n" if k % 50 == 49 else "\r"))
    return "".join(out)


def _a3mega_refresh() -> str:
    return next(ln for ln in (DATA / A3MEGA).read_text().split("\n") if "Epoch" in ln)


@pytest.mark.parametrize("redraws", [1, 2, 3])
def test_nemo1_repeated_redraws_read_as_the_exact_parser(redraws: int) -> None:
    text = _tqdm_log(_a3mega_refresh(), 200, redraws)
    _, ran = fast_and_exact(text, "nemo1")
    assert ran["tqdm-steps"]


def test_nemo1_repeats_with_nan_samples_still_count() -> None:
    text = _tqdm_log(_a3mega_refresh(), 100, 2).replace("consumed_samples=2048.0", "consumed_samples=nan")
    _same(text, "nemo1")
    assert any("logged again" in w for w in parse_text(text, "nemo1").warnings)


@pytest.mark.parametrize(
    "change",
    [
        (":  47%", ": [x] 47%"),  # a "[" before n/total: TQDM's lazy scan goes past it
        ("49.50]", "49.50] Epoch 1: 3/4 [a=1]"),  # a second bar in the same refresh
        ("reduced_train_loss=11.50, ", ""),  # one refresh with fewer items
        ("7/15", "7/?"),  # unknown total
        ("global_step=", "global_step ="),  # a label that strips alike
    ],
)
def test_nemo1_odd_refresh_agrees_with_exact(change: tuple[str, str]) -> None:
    refresh = _a3mega_refresh()
    text = _tqdm_log(refresh, 120, 2)
    at = text.index("\n") + 1
    text = text[:at] + refresh.replace(*change) + "\r" + text[at:]
    _same(text, "nemo1")


@pytest.mark.parametrize(
    "change",
    [
        ("7/15", "٧/15"),  # an Arabic-Indic digit: Python's \d, not Arrow's integer cast
        (":  47%", ":\u200a 47%"),  # a Unicode blank where TQDM reads \s
        ("Epoch 0:", "Epoch 0: 3/4 x"),  # a false n/total in the bar before the real one
        ("[06:19", "[A06:19"),  # a pager's redraw inside a refresh
        ("49.50]", "49.50"),  # no closing "]": TQDM may find a later one, or none
        ("Epoch 0:", "Epoch\u20030:"),  # a Unicode blank inside the marker
    ],
)
def test_nemo1_unicode_and_odd_shapes_agree_with_exact(change: tuple[str, str]) -> None:
    refresh = _a3mega_refresh()
    text = _tqdm_log(refresh, 120, 2)
    at = text.index("\n") + 1
    text = text[:at] + refresh.replace(*change) + "\r" + text[at:]
    _same(text, "nemo1")


def test_re2_spellings_match_python_classes() -> None:
    from hpckit.results import lines

    decimals = {c for a, b in lines.PY_DECIMAL_RUNS for c in range(a, b + 1)}
    assert decimals == {c for c in range(0x110000) if re.fullmatch(r"\d", chr(c))}
    assert lines.re2_unicode(r"\w+") is None and lines.re2_unicode(r"[\d]") is None
    spelt = lines.re2_unicode(r"a\s+(\d+)")
    assert spelt is not None and r"\s" not in spelt and r"\d" not in spelt


@pytest.mark.parametrize(
    "change",
    [
        ("| lr:", "| lr :"),  # a label spelt otherwise on one line: the exact parser decides
        ("| lr:", "|lr:"),
        (" | global_batch_size:", " | : 5 | global_batch_size:"),  # a piece without a label
        (" | global_batch_size:", " | noise | global_batch_size:"),  # a piece without ":"
    ],
)
def test_nemo2_odd_pieces_agree_with_exact(change: tuple[str, str]) -> None:
    text = _stretch((DATA / B200).read_text(), r"(iteration\s+)(\d+)")
    lines = text.split("\n")
    lines[5] = lines[5].replace(*change, 1)
    _same("\n".join(lines), "nemo2")


def test_nemo2_every_line_with_an_unlabelled_piece_agrees() -> None:
    text = _stretch((DATA / B200).read_text(), r"(iteration\s+)(\d+)")
    _same(text.replace(" | global_batch_size:", " | noise | global_batch_size:"), "nemo2")


# ---------------------------------------------------------------- one CSV read for heads, labels and values


@pytest.mark.parametrize(
    "change",
    [
        ("| lr: ", "| lr: 1:2 "),  # a ":" in one line's value: the count check declines
        ("Training epoch", "Training: epoch"),  # a ":" in a head
        ("| lr: ", "| lr: N/A"),  # a value that is no float: read as text, the exact parser warns
        ("| lr: ", "| lr:\t"),  # a tab Arrow trims, as str.strip does
        ("| lr: ", "| lr:\x0b"),  # a blank only Python strips: the float read fails, text decides
        ("| global_step: ", "| global_step: +"),
        ("| consumed_samples: ", "| consumed_samples: 1.5K"),  # a suffixed number
        ("| global_batch_size: 128", "| global_batch_size: 1e2"),  # an int written as a float
        ("| lr:", "| lr:: 3"),  # the label's ":" and one more
    ],
)
def test_nemo2_single_read_agrees_with_exact(change: tuple[str, str]) -> None:
    text = _stretch((DATA / B200).read_text(), r"(iteration\s+)(\d+)")
    lines = text.split("\n")
    lines[6] = lines[6].replace(*change, 1)
    _same("\n".join(lines), "nemo2")


def test_nemo2_single_read_takes_the_log_and_reads_floats() -> None:
    text = _stretch((DATA / B200).read_text(), r"(iteration\s+)(\d+)")
    found = training._step_lines_arrow(text, NEMO2_LINE, others=False)
    assert found is not None
    read = training.read_labelled(found[0], "|", ":", 1, lambda label: label != "global_batch_size")
    assert read is not None and len(read.heads) == 1
    labels = [label for label, _ in read.values]
    assert labels[:3] == ["lr", "global_batch_size", "global_step"]
    assert [str(v.type) for _, v in read.values][:2] == ["double", "large_string"]


@pytest.mark.parametrize(
    "change",
    [
        ("iteration 46/", "iteration 0046/"),  # leading zeros, as int() reads them
        ("iteration 46/", "iteration  46/"),  # another skeleton: RE2 extraction decides
        ("Training epoch 0,", "Training epoch 0, epoch 7,"),  # the first match, not the last
        ("iteration 46/", "iteration 99999999999999999999/"),  # no int64: the exact parser
    ],
)
def test_nemo2_heads_agree_with_exact(change: tuple[str, str]) -> None:
    text = _stretch((DATA / B200).read_text(), r"(iteration\s+)(\d+)")
    assert "iteration 46/" in text
    _same(text.replace(change[0], change[1], 1), "nemo2")


def test_marked_step_lines_as_python_picks_them() -> None:
    text = _stretch((DATA / B200).read_text(), r"(iteration\s+)(\d+)")
    lines = text.split("\n")
    lines.insert(4, "Training epoch 0, iteration 5/9 without a pipe")
    lines.insert(9, "noise | iteration 3 | more")
    odd = "\n".join(lines)
    arrow = training._step_lines_arrow(odd, NEMO2_LINE, others=False)
    assert arrow is not None
    assert (arrow[0].to_pylist(), arrow[1].tolist()) == _python_step_lines(odd, NEMO2_LINE)


@pytest.mark.parametrize("change", [("| lr: ", "| lr: "), ("| lr: ", "| lr: 1:2 "), ("| lr: ", "| lr: N/A")])
def test_nemo2_single_read_in_blocks_agrees(change: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(training, "BLOCK_LINES", 7)  # many blocks, the odd line in one of them
    text = _stretch((DATA / B200).read_text(), r"(iteration\s+)(\d+)")
    lines = text.split("\n")
    lines[100] = lines[100].replace(*change, 1)
    _same("\n".join(lines), "nemo2")


def test_markers_that_spell_iteration() -> None:
    assert training._spells(NEMO2_LINE.pattern, "iteration")
    assert not training._spells(MEGATRON_LINE.pattern, "iteration")  # an alternation in front
    for pattern in ("a|iteration", "iteratio?n", "(iteration)?", "[i]teration", "iteration*"):
        assert not training._spells(pattern, "iteration"), pattern
