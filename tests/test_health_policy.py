"""The drain policy (pure): every rule on its own, then invariants over random fleets (hypothesis)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpckit.health.model import ABSENT, Status
from hpckit.health.policy import (
    REACH_CHECK,
    Action,
    CheckMemory,
    NodeMemory,
    Outcome,
    Ownership,
    PolicySettings,
    Verdict,
    decide,
    drain_reason,
    fleet_counts,
    ownership,
    parse_reason,
)
from hpckit.slurm.parsers import NodeState

S = PolicySettings()


def node(name: str, state: str = "idle", reason: str = "", flags: str = "") -> NodeState:
    return NodeState(name, state, flags, reason)


def v(name: str, check: str, status: Status, fault: str | None = None) -> Verdict:
    if fault is None and status != Status.OK:
        fault = {"host.munge": "munge-down", "gpu.count": "gpu-missing"}.get(check, "broken")
    return Verdict(name, check, status, fault, f"{check} {status.name}")


def fleet(*states: NodeState) -> dict[str, NodeState]:
    return {s.name: s for s in states}


def run_many(
    runs: Sequence[Sequence[Verdict]],
    slurm: Mapping[str, NodeState],
    policy: PolicySettings = S,
    memory: Mapping[str, NodeMemory] | None = None,
) -> list[Outcome]:
    """Several runs in a row, memory carried over, Slurm state as given (tests change it themselves)."""
    mem = dict(memory or {})
    outs = []
    for run in runs:
        out = decide(run, slurm, mem, policy)
        mem = dict(out.memory)
        outs.append(out)
    return outs


# --- reasons and ownership ------------------------------------------------------------------------------


def test_reason_round_trip() -> None:
    reason = drain_reason("munge-down", "host.munge")
    assert reason == "hpckit:munge-down:host.munge"
    assert parse_reason(reason) == ("munge-down", "host.munge")
    assert parse_reason("bad dimm, ticket 123") is None
    assert parse_reason("hpckit:gpu-missing:gpu.count [root@2026-11-20]") == ("gpu-missing", "gpu.count")


@pytest.mark.parametrize(
    ("state", "reason", "flags", "expected"),
    [
        ("idle", "", "", Ownership.IN_SERVICE),
        ("mixed", "", "", Ownership.IN_SERVICE),
        ("allocated", "", "", Ownership.IN_SERVICE),
        ("completing", "", "", Ownership.IN_SERVICE),
        ("drained", "hpckit:munge-down:host.munge", "", Ownership.OURS),
        ("draining", "hpckit:munge-down:host.munge", "", Ownership.OURS),
        ("drained", "hpckit:x:y", "*", Ownership.OURS),
        ("drained", "dimm replacement", "", Ownership.FOREIGN),
        ("draining", "admin: testing", "", Ownership.FOREIGN),
        ("drained", "", "", Ownership.FOREIGN),
        ("down", "Not responding", "*", Ownership.UNAVAILABLE),
        ("down", "hpckit:munge-down:host.munge", "*", Ownership.OURS),  # Slurm set DOWN, kept hpckit's reason
        ("down", "admin: PSU swap", "", Ownership.UNAVAILABLE),
        ("idle", "", "*", Ownership.IN_SERVICE),
        ("fail", "bad", "", Ownership.UNAVAILABLE),
        ("maint", "", "", Ownership.UNAVAILABLE),
        ("unknown", "", "", Ownership.UNAVAILABLE),
        ("future", "", "", Ownership.UNAVAILABLE),
    ],
)
def test_ownership(state: str, reason: str, flags: str, expected: Ownership) -> None:
    assert ownership(node("n", state, reason, flags)) is expected


@pytest.mark.parametrize(
    ("state", "reason", "expected"),
    [
        ("down", "Not responding", Ownership.OURS),  # hpckit saw it failing, then Slurm set it DOWN
        ("down", "Kill task failed", Ownership.OURS),
        ("drained", "Not responding", Ownership.OURS),
        ("down", "admin: PSU swap", Ownership.UNAVAILABLE),  # a person took it over meanwhile
        ("drained", "admin: fan", Ownership.FOREIGN),
        ("idle", "", Ownership.IN_SERVICE),
    ],
)
def test_ownership_of_a_node_hpckit_saw_failing(state: str, reason: str, expected: Ownership) -> None:
    assert ownership(node("n", state, reason, "*"), claimed=True) is expected
    if expected is Ownership.OURS:
        assert ownership(node("n", state, reason, "*")) is not Ownership.OURS  # only with the claim


def test_unreachable_reason_round_trip() -> None:
    reason = drain_reason("munge", REACH_CHECK)
    assert reason == "hpckit:unreachable:munge"
    assert parse_reason(reason) == ("munge", REACH_CHECK)


# --- nodes that cannot be checked (health.reach) -------------------------------------------------------


def reach(name: str, why: str | None = "ssh") -> Verdict:
    if why is None:
        return Verdict(name, REACH_CHECK, Status.OK, None, "its sweep job ran")
    return Verdict(name, REACH_CHECK, Status.UNKNOWN, why, f"could not check it ({why})")


def test_an_unreachable_node_is_drained_after_m_runs_never_reported_healthy() -> None:
    slurm = fleet(node("n1", flags="*"), node("n2"), node("n3"), node("n4"))
    others = [reach(n, None) for n in ("n2", "n3", "n4")]
    outs = run_many([[reach("n1"), *others]] * 3, slurm)
    assert [o.decision("n1").action for o in outs] == [Action.NONE, Action.NONE, Action.DRAIN]
    assert all("healthy" not in o.decision("n1").why for o in outs[:2])
    assert "not checked" in outs[0].decision("n1").why and "1 of 3" in outs[0].decision("n1").why
    assert outs[2].decision("n1").reason == "hpckit:unreachable:ssh"


def test_unreachable_never_counts_as_a_clean_run_and_resume_needs_n_reached_runs() -> None:
    slurm = fleet(node("n1", "drained", "hpckit:unreachable:ssh"))
    mem = {"n1": NodeMemory({REACH_CHECK: CheckMemory(0, 0, 3)}, 0)}
    outs = run_many([[reach("n1", "slurmctld")], [reach("n1", None)], [reach("n1", "ssh")]], slurm, memory=mem)
    assert [o.decision("n1").action for o in outs] == [Action.KEEP, Action.KEEP, Action.KEEP]
    assert outs[2].memory["n1"].clean_runs == 0
    outs = run_many([[reach("n1", None)]] * 2, slurm, memory=outs[-1].memory)
    assert [o.decision("n1").action for o in outs] == [Action.KEEP, Action.RESUME]


def test_a_node_drained_for_a_check_is_not_resumed_while_it_cannot_be_checked() -> None:
    slurm = fleet(node("n1", "drained", OURS))
    mem = {"n1": NodeMemory({"host.munge": CheckMemory(5, 0, 0)}, 5)}
    out = decide([reach("n1", "ssh")], slurm, mem, S)
    assert out.decision("n1").action is Action.KEEP and "cannot be checked" in out.decision("n1").why


def test_the_breaker_holds_a_fleet_that_cannot_be_checked() -> None:
    slurm = fleet(*(node(f"n{i}", flags="*") for i in range(1, 5)))
    outs = run_many([[reach(f"n{i}", "slurmctld") for i in range(1, 5)]] * 4, slurm)
    assert [t.check for t in outs[-1].trips] == [REACH_CHECK]
    assert {d.action for o in outs for d in o.decisions} == {Action.NONE}


def test_a_node_slurm_set_down_while_hpckit_saw_it_failing() -> None:
    """Claimed: still failing -> hpckit's own reason replaces Slurm's; fixed -> resumed after N clean runs."""
    slurm = fleet(node("n1", "down", "Not responding", "*"))
    out = decide([v("n1", "host.munge", Status.FAIL), reach("n1", "munge")], slurm, {}, S, claimed=frozenset({"n1"}))
    assert out.decision("n1").action is Action.REDRAIN
    assert out.decision("n1").reason == "hpckit:munge-down:host.munge"
    out = decide([v("n1", "host.munge", Status.FAIL)], slurm, {}, S)
    assert out.decision("n1").action is Action.SKIP  # not claimed: Slurm's business
    slurm = fleet(node("n1", "down", "Not responding"))
    clean = [v("n1", "host.munge", Status.OK), reach("n1", None)]
    outs = []
    mem: dict[str, NodeMemory] = {}
    for _ in range(2):
        outs.append(decide(clean, slurm, mem, S, claimed=frozenset({"n1"})))
        mem = dict(outs[-1].memory)
    assert [o.decision("n1").action for o in outs] == [Action.KEEP, Action.RESUME]
    assert outs[1].decision("n1").reason == "Not responding"


def test_missing_node_is_not_touched() -> None:
    assert ownership(None) is Ownership.MISSING
    out = decide([v("n9", "host.munge", Status.FAIL)], {}, {}, S)
    assert out.decision("n9").action is Action.SKIP


# --- draining -----------------------------------------------------------------------------------------


def test_fail_drains_with_a_reason_naming_fault_and_check() -> None:
    slurm = fleet(node("n1"), node("n2"), node("n3"), node("n4"))
    run = [v("n1", "host.munge", Status.FAIL)] + [v(n, "host.munge", Status.OK) for n in ("n2", "n3", "n4")]
    out = decide(run, slurm, {}, S)
    d = out.decision("n1")
    assert (d.action, d.reason, d.enforce) == (Action.DRAIN, "hpckit:munge-down:host.munge", True)
    assert all(out.decision(n).action is Action.NONE for n in ("n2", "n3", "n4"))


def test_first_failing_check_names_the_reason_and_all_are_explained() -> None:
    run = [v("n1", "host.munge", Status.FAIL), v("n1", "gpu.count", Status.FAIL)]
    d = decide(run, fleet(node("n1")), {}, S).decision("n1")
    assert d.reason == "hpckit:munge-down:host.munge"
    assert "host.munge" in d.why and "gpu.count" in d.why


@pytest.mark.parametrize("status", [Status.OK, Status.WARN, Status.UNKNOWN])
def test_nothing_but_fail_drains(status: Status) -> None:
    outs = run_many([[v("n1", "host.munge", status)]] * 10, fleet(node("n1")))
    assert all(o.decision("n1").action is Action.NONE for o in outs)


def test_unknown_escalates_after_m_repeats_and_never_drains() -> None:
    policy = PolicySettings(escalate_unknown_after=3)
    outs = run_many([[v("n1", "host.clock", Status.UNKNOWN, "clock-timeout")]] * 4, fleet(node("n1")), policy)
    assert [len(o.escalations) for o in outs] == [0, 0, 1, 1]
    assert outs[2].escalations[0].unknowns == 3 and outs[2].escalations[0].check == "host.clock"
    assert all(o.decision("n1").action is Action.NONE for o in outs)


def test_an_answer_resets_the_unknown_count() -> None:
    policy = PolicySettings(escalate_unknown_after=2)
    runs = [
        [v("n1", "host.clock", Status.UNKNOWN, "t")],
        [v("n1", "host.clock", Status.OK)],
        [v("n1", "host.clock", Status.UNKNOWN, "t")],
    ]
    assert [len(o.escalations) for o in run_many(runs, fleet(node("n1")), policy)] == [0, 0, 0]


def test_absent_is_not_a_tool_failure_and_never_escalates() -> None:
    policy = PolicySettings(escalate_unknown_after=1)
    outs = run_many([[v("n1", "gpu.ecc", Status.UNKNOWN, ABSENT)]] * 5, fleet(node("n1")), policy)
    assert not any(o.escalations for o in outs)
    assert outs[-1].memory["n1"].checks["gpu.ecc"].unknowns == 0


def test_admin_drained_node_is_never_touched() -> None:
    slurm = fleet(node("n1", "drained", "replacing DIMM B3, ticket 4711"))
    for status in Status:
        outs = run_many([[v("n1", "host.munge", status)]] * 5, slurm)
        assert all(o.decision("n1").action is Action.SKIP for o in outs)
        assert "replacing DIMM B3" in outs[0].decision("n1").why


@pytest.mark.parametrize(("state", "flags"), [("down", "*"), ("down", ""), ("fail", ""), ("maint", "")])
def test_down_or_unresponsive_node_is_never_touched(state: str, flags: str) -> None:
    d = decide([v("n1", "host.munge", Status.FAIL)], fleet(node("n1", state, "x", flags)), {}, S).decision("n1")
    assert d.action is Action.SKIP


def test_report_only_computes_but_does_not_enforce() -> None:
    d = decide([v("n1", "host.munge", Status.FAIL)], fleet(node("n1")), {}, PolicySettings(drain=False))
    assert d.decision("n1").action is Action.DRAIN and not d.decision("n1").enforce


def test_disabled_check_never_drains() -> None:
    policy = PolicySettings(disabled_checks=frozenset({"host.munge"}))
    out = decide([v("n1", "host.munge", Status.FAIL)], fleet(node("n1")), {}, policy)
    assert out.decisions == ()  # the only verdict was switched off: nothing to decide


def test_confirm_fails_waits_for_a_second_fail() -> None:
    policy = PolicySettings(confirm_fails=2)
    runs = [[v("n1", "host.munge", Status.FAIL)], [v("n1", "host.munge", Status.FAIL)]]
    outs = run_many(runs, fleet(node("n1")), policy)
    assert outs[0].decision("n1").action is Action.NONE and "1 of 2" in outs[0].decision("n1").why
    assert outs[1].decision("n1").action is Action.DRAIN


def test_confirm_fails_a_pass_in_between_starts_over() -> None:
    policy = PolicySettings(confirm_fails=2)
    f, p = [v("n1", "host.munge", Status.FAIL)], [v("n1", "host.munge", Status.OK)]
    outs = run_many([f, p, f], fleet(node("n1")), policy)
    assert [o.decision("n1").action for o in outs] == [Action.NONE] * 3


def test_confirm_fails_an_unknown_in_between_neither_confirms_nor_clears() -> None:
    policy = PolicySettings(confirm_fails=2)
    f, u = [v("n1", "host.munge", Status.FAIL)], [v("n1", "host.munge", Status.UNKNOWN, "t")]
    outs = run_many([f, u, f], fleet(node("n1")), policy)
    assert [o.decision("n1").action for o in outs] == [Action.NONE, Action.NONE, Action.DRAIN]


# --- resuming -----------------------------------------------------------------------------------------

OURS = "hpckit:munge-down:host.munge"


def test_resume_after_n_consecutive_passes_not_before() -> None:
    slurm = fleet(node("n1", "drained", OURS))
    ok = [v("n1", "host.munge", Status.OK)]
    outs = run_many([ok, ok, ok], slurm, PolicySettings(resume_after=3))
    assert [o.decision("n1").action for o in outs] == [Action.KEEP, Action.KEEP, Action.RESUME]
    assert outs[2].decision("n1").reason == OURS


def test_a_fail_while_recovering_starts_the_count_again() -> None:
    slurm = fleet(node("n1", "drained", OURS))
    ok, bad = [v("n1", "host.munge", Status.OK)], [v("n1", "host.munge", Status.FAIL)]
    outs = run_many([ok, bad, ok, ok], slurm, PolicySettings(resume_after=2))
    assert [o.decision("n1").action for o in outs] == [Action.KEEP, Action.KEEP, Action.KEEP, Action.RESUME]


def test_unknown_on_the_drain_check_is_not_a_pass() -> None:
    slurm = fleet(node("n1", "drained", OURS))
    ok, unk = [v("n1", "host.munge", Status.OK)], [v("n1", "host.munge", Status.UNKNOWN, "t")]
    outs = run_many([ok, unk, ok, ok], slurm, PolicySettings(resume_after=2))
    assert [o.decision("n1").action for o in outs] == [Action.KEEP, Action.KEEP, Action.KEEP, Action.RESUME]


def test_another_failing_check_keeps_it_drained() -> None:
    slurm = fleet(node("n1", "drained", OURS))
    run = [v("n1", "host.munge", Status.OK), v("n1", "gpu.count", Status.FAIL)]
    outs = run_many([run] * 3, slurm, PolicySettings(resume_after=1))
    assert outs[0].decision("n1").action is Action.REDRAIN
    assert outs[0].decision("n1").reason == "hpckit:gpu-missing:gpu.count"


def test_still_failing_keeps_the_reason() -> None:
    slurm = fleet(node("n1", "drained", OURS))
    d = decide([v("n1", "host.munge", Status.FAIL)], slurm, {}, S).decision("n1")
    assert d.action is Action.KEEP and not d.changes_slurm


def test_node_drained_for_a_now_disabled_check_resumes_on_clean_runs() -> None:
    slurm = fleet(node("n1", "drained", OURS))
    policy = PolicySettings(resume_after=2, disabled_checks=frozenset({"host.munge"}))
    run = [v("n1", "host.munge", Status.FAIL), v("n1", "host.slurmd", Status.OK)]
    outs = run_many([run, run], slurm, policy)
    assert [o.decision("n1").action for o in outs] == [Action.KEEP, Action.RESUME]


def test_a_node_drained_by_another_tool_is_held_through_clean_sweeps() -> None:
    # `hpckit bench bisect --drain` writes hpckit:slow-fabric:bisect; no sweep runs `bisect`, so clean
    # sweeps say nothing about the fabric and must not bring the node back.
    slurm = fleet(node("n1", "drained", "hpckit:slow-fabric:bisect rail mlx5_3 12.0 GB/s"))
    outs = run_many([[v("n1", "host.munge", Status.OK)]] * 4, slurm, PolicySettings(resume_after=2))
    assert [o.decision("n1").action for o in outs] == [Action.KEEP] * 4
    assert "bisect" in outs[-1].decision("n1").why


def test_warn_counts_as_a_pass() -> None:
    slurm = fleet(node("n1", "drained", OURS))
    outs = run_many([[v("n1", "host.munge", Status.WARN)]] * 2, slurm, PolicySettings(resume_after=2))
    assert outs[-1].decision("n1").action is Action.RESUME


def test_report_only_resume_is_not_enforced() -> None:
    slurm = fleet(node("n1", "drained", OURS))
    memory = {"n1": NodeMemory({"host.munge": CheckMemory(passes=5)}, clean_runs=5)}
    d = decide([v("n1", "host.munge", Status.OK)], slurm, memory, PolicySettings(drain=False)).decision("n1")
    assert d.action is Action.RESUME and not d.enforce


# --- circuit breaker ----------------------------------------------------------------------------------


def _four(failing: int, check: str = "host.munge") -> tuple[list[Verdict], dict[str, NodeState]]:
    names = [f"n{i}" for i in range(1, 5)]
    run = [v(n, check, Status.FAIL if i < failing else Status.OK) for i, n in enumerate(names)]
    return run, fleet(*(node(n) for n in names))


def test_breaker_three_of_four_drains_none() -> None:
    run, slurm = _four(3)
    out = decide(run, slurm, {}, S)
    assert [d.action for d in out.decisions] == [Action.NONE] * 4
    (trip,) = out.trips
    assert (trip.check, trip.failing, trip.checked) == ("host.munge", ("n1", "n2", "n3"), 4)
    assert "configuration regression" in trip.message(S.circuit_breaker)
    assert "held by the circuit breaker" in out.decision("n1").why


def test_breaker_one_of_four_drains_it() -> None:
    run, slurm = _four(1)
    out = decide(run, slurm, {}, S)
    assert out.decision("n1").action is Action.DRAIN and not out.trips


def test_breaker_threshold_is_more_than_not_at_least() -> None:
    run = [v(f"n{i}", "host.munge", Status.FAIL if i < 3 else Status.OK) for i in range(10)]
    slurm = fleet(*(node(f"n{i}") for i in range(10)))
    out = decide(run, slurm, {}, S)  # 3 of 10 = 30 %: not more than 30 %
    assert not out.trips and sum(d.action is Action.DRAIN for d in out.decisions) == 3


def test_breaker_needs_two_failing_nodes() -> None:
    run = [v("n1", "host.munge", Status.FAIL), v("n2", "host.munge", Status.OK)]
    out = decide(run, fleet(node("n1"), node("n2")), {}, S)
    assert out.decision("n1").action is Action.DRAIN and not out.trips


def test_breaker_is_per_check() -> None:
    run, slurm = _four(3, "gpu.count")
    run.append(v("n4", "host.munge", Status.FAIL))
    out = decide(run, slurm, {}, S)
    assert [t.check for t in out.trips] == ["gpu.count"]
    assert out.decision("n4").action is Action.DRAIN and out.decision("n4").reason == "hpckit:munge-down:host.munge"
    assert out.decision("n1").action is Action.NONE


def test_breaker_holds_back_resume_of_nodes_still_failing() -> None:
    run, slurm = _four(3)
    slurm["n1"] = node("n1", "drained", OURS)
    out = decide(run, slurm, {}, S)
    assert out.decision("n1").action is Action.KEEP


def test_breaker_uses_the_fleet_view_it_is_given() -> None:
    """The quick tier decides for one node with the others' stored verdicts as its fleet view."""
    others = [v(n, "host.munge", Status.FAIL) for n in ("n2", "n3")] + [v("n4", "host.munge", Status.OK)]
    mine = [v("n1", "host.munge", Status.FAIL)]
    out = decide(mine, fleet(node("n1")), {}, S, fleet_counts(mine + others))
    assert out.trips and out.decision("n1").action is Action.NONE
    out = decide(mine, fleet(node("n1")), {}, S, fleet_counts([*mine, v("n2", "host.munge", Status.OK)]))
    assert out.decision("n1").action is Action.DRAIN


def test_disabled_checks_never_trip_the_breaker() -> None:
    run, slurm = _four(4)
    out = decide(run, slurm, {}, PolicySettings(disabled_checks=frozenset({"host.munge"})))
    assert not out.trips


# --- invariants over random fleets --------------------------------------------------------------------

CHECKS = ("host.munge", "gpu.count", "host.mounts", REACH_CHECK)
STATES = [
    ("down", "hpckit:unreachable:ssh", "*"),
    ("down", "admin: PSU", ""),
    ("idle", "", ""),
    ("mixed", "", ""),
    ("drained", OURS, ""),
    ("drained", "hpckit:gpu-missing:gpu.count", ""),
    ("drained", "admin", ""),
    ("down", "Not responding", "*"),
    ("idle", "", "*"),
]


Case = tuple[list[Verdict], dict[str, NodeState], dict[str, NodeMemory], PolicySettings, frozenset[str]]


@st.composite
def fleets(draw: st.DrawFn) -> Case:
    size = draw(st.integers(1, 12))
    names = [f"n{i}" for i in range(size)]
    slurm = {n: node(n, *draw(st.sampled_from(STATES))) for n in names}
    run = []
    for n in names:
        for c in draw(st.lists(st.sampled_from(CHECKS), unique=True)):
            status = draw(st.sampled_from(list(Status)))
            run.append(v(n, c, status, draw(st.sampled_from(["t", ABSENT])) if status == Status.UNKNOWN else None))
    memory = {
        n: NodeMemory(
            {c: CheckMemory(draw(st.integers(0, 3)), draw(st.integers(0, 3)), draw(st.integers(0, 3))) for c in CHECKS},
            draw(st.integers(0, 3)),
        )
        for n in names
    }
    policy = PolicySettings(
        resume_after=draw(st.integers(1, 3)),
        confirm_fails=draw(st.integers(1, 2)),
        disabled_checks=frozenset(draw(st.lists(st.sampled_from(CHECKS), max_size=1))),
    )
    claimed = frozenset(draw(st.lists(st.sampled_from(names))))
    return run, slurm, memory, policy, claimed


@pytest.mark.slow  # 300 generated fleets: ~5 s idle, 14-17 s under load
@settings(max_examples=300, deadline=None)
@given(fleets())
def test_invariants(case: Case) -> None:
    run, slurm, memory, policy, claimed = case
    out = decide(run, slurm, memory, policy, claimed=claimed)
    tripped = {t.check for t in out.trips}
    for d in out.decisions:
        owner = ownership(slurm.get(d.node), d.node in claimed)
        node_run = [x for x in run if x.node == d.node and x.check not in policy.disabled_checks]
        if owner in (Ownership.FOREIGN, Ownership.UNAVAILABLE, Ownership.MISSING):
            assert d.action is Action.SKIP  # never touch what is not ours
        if d.action in (Action.DRAIN, Action.REDRAIN):
            assert d.reason is not None and d.reason.startswith("hpckit:")
            parsed = parse_reason(d.reason)
            assert parsed is not None
            check = parsed[1]
            failing = {x.check for x in node_run if x.status == Status.FAIL}
            blind = {x.check for x in node_run if x.check == REACH_CHECK and x.status == Status.UNKNOWN}
            blind_long = blind and out.memory[d.node].checks[REACH_CHECK].unknowns >= policy.escalate_unknown_after
            # a drain names a check that FAILed in this run, or a node not checkable for M runs in a row
            assert check in failing or (check == REACH_CHECK and blind_long)
            assert check not in tripped  # never drain for a check the breaker holds
            assert check not in policy.disabled_checks
        if d.action is Action.RESUME:
            assert owner is Ownership.OURS
            assert not any(x.status == Status.FAIL for x in node_run)  # never resume a failing node
            assert not any(
                x.check == REACH_CHECK and x.status == Status.UNKNOWN and x.fault != ABSENT for x in node_run
            )
    for trip in out.trips:
        assert len(trip.failing) / trip.checked > policy.circuit_breaker
