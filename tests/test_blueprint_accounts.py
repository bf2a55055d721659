"""`accounting:`: accounts, users and QOS declared in the blueprint, each mistake located at its line."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpckit.blueprint import Blueprint, BlueprintError, parse_blueprint
from hpckit.slurm_accounts import minutes, normal, tres, tres_problem
from tests.test_blueprint import GOOD

ACCOUNTING = """\
accounting:
  qos:
    high:
      priority: 100
      preempt: [low]
      flags: [DenyOnLimit]
      limits: {MaxTRESPerUser: "gres/gpu=8", MaxWall: "2-00:00:00"}
    low: {priority: 10, limits: {MaxJobsPerUser: 2}}
  accounts:
    research: {organization: acme, fairshare: 100}
    vision: {parent: research, fairshare: 60, qos: [low, high], default_qos: low, limits: {GrpTRES: "cpu=64,mem=512G"}}
    nlp: {parent: research, fairshare: 40}
  users:
    alice: {default_account: vision, accounts: [vision, nlp], limits: {MaxJobs: 1}}
    bob: {default_account: nlp, admin: operator}
"""


def located(text: str) -> list[str]:
    with pytest.raises(BlueprintError) as info:
        parse_blueprint(text, "bp.yaml")
    lines = str(info.value).splitlines()
    for line in lines:
        assert re.match(r"^bp\.yaml:\d+:\d+: \S+: .+", line), line
    return lines


def test_a_declared_tree_validates() -> None:
    bp = parse_blueprint(GOOD + ACCOUNTING, "bp.yaml")
    assert bp.accounting is not None
    assert list(bp.accounting.accounts) == ["research", "vision", "nlp"]
    assert bp.accounting.users["bob"].all_accounts == ["nlp"]
    assert bp.accounting.qos["high"].limits == {"MaxTRESPerUser": "gres/gpu=8", "MaxWall": "2-00:00:00"}
    assert parse_blueprint(GOOD, "bp.yaml").accounting is None


@pytest.mark.parametrize(
    ("old", "new", "where", "says"),
    [
        ("parent: research, fairshare: 60", "parent: reserch, fairshare: 60", "accounting.accounts.vision.parent",
         "account 'reserch' is not declared"),
        ("research: {organization: acme, fairshare: 100}", "research: {parent: nlp}",
         "accounting.accounts.research.parent", "loop: research -> nlp -> research"),
        ("alice: {default_account: vision, accounts: [vision, nlp]", "alice: {default_account: vision, accounts: [nlp]",
         "accounting.users.alice.default_account", "'vision' is not one of the user's accounts"),
        ("bob: {default_account: nlp", "bob: {default_account: ops", "accounting.users.bob.default_account",
         "account 'ops' is not declared"),
        ("default_qos: low", "default_qos: urgent", "accounting.accounts.vision.default_qos",
         "QOS 'urgent' is not declared"),
        ("qos: [low, high], default_qos: low", "qos: [high], default_qos: low",
         "accounting.accounts.vision.default_qos", "not in its qos list"),
        ("preempt: [low]", "preempt: [high]", "accounting.qos.high.preempt[0]", "cannot preempt itself"),
        ('GrpTRES: "cpu=64,mem=512G"', 'GrpTRES: "cpus=64"', "accounting.accounts.vision.limits",
         "cpus is not a TRES Slurm knows"),
        ('MaxTRESPerUser: "gres/gpu=8"', 'MaxTRESPerUser: "gres/fpga=8"', "accounting.qos.high.limits.MaxTRESPerUser",
         "gres/fpga: the cluster declares no such GRES (it has gpu)"),
        ("MaxJobsPerUser: 2", "MaxJobsPerUsr: 2", "accounting.qos.low.limits", "'MaxJobsPerUsr' is not a QOS limit"),
        ("MaxJobs: 1", "MaxJobsPerUser: 1", "accounting.users.alice.limits",
         "'MaxJobsPerUser' is not an association limit"),
        ('MaxWall: "2-00:00:00"', 'MaxWall: "two days"', "accounting.qos.high.limits", "is not a duration"),
        ("flags: [DenyOnLimit]", "flags: [DenyOnLimits]", "accounting.qos.high.flags", "not a QOS flag"),
        ("    vision:", "    Vision:", "accounting.accounts.Vision", "should match pattern"),
        ("admin: operator", "admin: root", "accounting.users.bob.admin", "Input should be"),
    ],
)  # fmt: skip
def test_each_mistake_is_located(old: str, new: str, where: str, says: str) -> None:
    text = GOOD + ACCOUNTING
    assert old in text
    lines = located(text.replace(old, new, 1))
    assert any(where in line and says in line for line in lines), lines


def test_slurm_s_own_normal_qos_is_named_without_being_declared() -> None:
    text = GOOD + ACCOUNTING.replace("qos: [low, high], default_qos: low", "qos: [normal, high], default_qos: normal")
    bp = parse_blueprint(text.replace("preempt: [low]", "preempt: [low, normal]"), "bp.yaml")
    assert bp.accounting is not None and bp.accounting.accounts["vision"].qos == ["normal", "high"]


def test_accounts_need_accounting_on() -> None:
    text = GOOD.replace("provider: {type: lab}", "provider: {type: lab}\nslurm: {accounting: false}") + ACCOUNTING
    lines = located(text)
    assert any(": accounting: " in line and "slurm.accounting: true" in line for line in lines), lines


def test_values_compare_as_slurm_prints_them() -> None:
    assert tres("mem=512G,cpu=64") == "cpu=64,mem=524288" == tres("cpu=64,mem=524288")
    assert minutes("2-00:00:00") == 2880 == minutes("2880") == minutes("1-24:00:00")
    assert minutes("01:00:00") == 60 and minutes("1:30") == 2 and minutes("1-12") == 2160
    assert normal("list", ["High", "low"]) == normal("list", "low,high") == "high,low"
    assert normal("int", None) == "" and normal("duration", "60") == "60"
    assert tres_problem("gres/gpu:h100=8", frozenset({"gpu"})) is None
    assert (
        tres_problem("gres/gpu=8", frozenset()) == "gres/gpu: the cluster declares no such GRES (no partition has GPUs)"
    )
    assert tres_problem("cpu=4,cpu=5") == "cpu is given twice"
    assert tres_problem("node=2G") == "node=2G: only mem takes a unit"


names = st.sampled_from(["root", "a", "b", "c", "vision", "Bad", "x y", "", "high", "low"])
values = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), names, st.lists(names, max_size=3))
limits = st.dictionaries(
    st.sampled_from(["GrpTRES", "MaxJobs", "MaxWall", "MaxJobsPerUser", "x"]),
    st.one_of(values, st.sampled_from(["cpu=1", "gres/gpu=2", "1-00:00", "mem=1Q"])),
)
bodies = st.dictionaries(
    st.sampled_from(["parent", "default_account", "accounts", "qos", "default_qos", "preempt", "limits", "fairshare",
                     "admin", "flags", "priority", "organization", "bogus"]),
    st.one_of(values, limits),
    max_size=5,
)  # fmt: skip
trees = st.dictionaries(
    st.sampled_from(["qos", "accounts", "users", "owns_tree", "priority", "other"]),
    st.one_of(values, st.dictionaries(names, st.one_of(bodies, values), max_size=4)),
    max_size=4,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
def test_fuzzed_trees_give_located_errors_never_a_traceback(tree: dict[str, object]) -> None:
    text = GOOD + yaml.safe_dump({"accounting": tree}, sort_keys=False)
    try:
        result = parse_blueprint(text, "bp.yaml")
    except BlueprintError as exc:
        assert exc.problems
        for line in str(exc).splitlines():
            assert re.match(r"^bp\.yaml:\d+:\d+: \S.*: .+", line), line
    else:
        assert isinstance(result, Blueprint)


PRIORITY = """\
  priority:
    weights: {fairshare: 50000, qos: 20000, age: 0}
    decay_half_life: 14-0
"""


def test_priority_weights_reach_slurm_conf_once_accounts_are_declared() -> None:
    from hpckit.clusters import SshAccess
    from hpckit.deploy.playvars import build_vars
    from hpckit.deploy.render import Inventory, host_context, render

    bp = parse_blueprint(GOOD + ACCOUNTING + PRIORITY, "bp.yaml")
    inventory, extravars = build_vars(bp, SshAccess("root"))
    assert extravars["slurm_priority"] == {
        "PriorityWeightFairshare": 50000, "PriorityWeightQOS": 20000, "PriorityWeightAge": 0,
        "PriorityWeightJobSize": 0, "PriorityWeightPartition": 0, "PriorityWeightAssoc": 0,
        "PriorityDecayHalfLife": "14-0",
    }  # fmt: skip
    host = bp.controller.host
    conf = render("slurm_common", "slurm.conf.j2", host_context(Inventory(inventory), extravars, host, "slurm"))
    lines = conf.splitlines()
    for wanted in ("PriorityType=priority/multifactor", "PriorityWeightFairshare=50000", "PriorityWeightAge=0",
                   "PriorityDecayHalfLife=14-0", "AccountingStorageEnforce=associations,limits,qos,safe"):  # fmt: skip
        assert wanted in lines, wanted
    plain = parse_blueprint(GOOD, "bp.yaml")
    inventory, extravars = build_vars(plain, SshAccess("root"))
    conf = render("slurm_common", "slurm.conf.j2", host_context(Inventory(inventory), extravars, host, "slurm"))
    assert "Priority" not in conf and "AccountingStorageEnforce" not in conf and "slurm_priority" not in extravars


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        ("accounting:\n" + PRIORITY, "accounting.priority",
         "PriorityWeight", ),
        ("slurm:\n  conf: {PriorityWeightAge: 100}\n", "slurm.conf.PriorityWeightAge",
         "takes effect only with PriorityType=priority/multifactor (man2411); this cluster's slurm.conf has no "
         "PriorityType"),
        ("slurm:\n  conf: {PriorityType: priority/basic}\n" + ACCOUNTING, "accounting.priority",
         "has PriorityType=priority/basic"),
        ("accounting:\n  priority: {decay_half_life: a week}\n", "accounting.priority.decay_half_life",
         "is not a duration"),
    ],
)  # fmt: skip
def test_priority_keys_that_would_take_no_effect_are_located(text: str, where: str, says: str) -> None:
    lines = located(GOOD + text)
    assert any(where in line and says in line for line in lines), lines


def test_priority_overrides_with_multifactor_are_taken() -> None:
    bp = parse_blueprint(GOOD + "slurm:\n  conf: {PriorityType: priority/multifactor, PriorityWeightAge: 5}\n", "b")
    assert bp.slurm.conf["PriorityWeightAge"] == 5
