"""The blueprint's accounts, users and QOS against live ones: the sacctmgr commands, in Slurm's order."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from hpckit.blueprint import parse_blueprint
from hpckit.blueprint.models import AccountingSpec
from hpckit.deploy.accounts import (
    AccountsRefused,
    Change,
    Planned,
    affected_jobs,
    apply_accounts,
    diff,
    parents_first,
    plan_accounts,
    wanted_assoc,
    wanted_qos,
)
from hpckit.deploy.accounts_export import export_accounting
from hpckit.slurm.accounts import QueuedJob, parse_live, show_commands
from hpckit.slurm_accounts import AccountsError, Live, LiveAssoc, LiveQos
from tests.fakes import scripted
from tests.test_blueprint import GOOD
from tests.test_blueprint_accounts import ACCOUNTING


def spec(text: str = ACCOUNTING, owns: bool = False) -> AccountingSpec:
    found = parse_blueprint(GOOD + text, "bp.yaml").accounting
    assert found is not None
    return found.model_copy(update={"owns_tree": owns})


def live_of(s: AccountingSpec) -> Live:
    """What sacctmgr shows once the spec is applied."""
    live = Live(qos={n: LiveQos(n, wanted_qos(q)) for n, q in s.qos.items()})
    live.qos["normal"] = LiveQos("normal", wanted_qos(s.qos["low"].model_copy(update={"priority": 0, "limits": {}})))
    live.accounts["root"] = LiveAssoc("root", "", "", {})
    for name, a in s.accounts.items():
        live.accounts[name] = LiveAssoc(name, "", a.parent or "root", wanted_assoc(a))
    for name, u in s.users.items():
        for account in u.all_accounts:
            live.users[(name, account)] = LiveAssoc(account, name, account, wanted_assoc(u))
        live.default_accounts[name] = u.default_account
        live.admin_levels[name] = u.admin
    return live


def shown(changes: tuple[Change, ...]) -> list[str]:
    return [f"{c.action} {c.kind} {c.name}" + (f"/{c.account}" if c.account else "") for c in changes]


def test_a_new_tree_is_added_qos_first_parents_before_children() -> None:
    found = diff(spec(), Live(), "t")
    assert shown(found.changes) == [
        "add qos high", "add qos low", "modify qos high", "add account research", "add account vision",
        "add account nlp", "add user alice/vision", "add user alice/nlp", "add user bob/nlp",
    ]  # fmt: skip
    high = found.changes[0].argv
    assert high[:5] == ("sacctmgr", "--immediate", "add", "qos", "high")
    assert {"Priority=100", "Flags=denyonlimit", "MaxTRESPerUser=gres/gpu=8", "MaxWall=2880"} <= set(high)
    # sacctmgr refuses to name a QOS that is not there yet ("You gave a bad qos 'low'"): Preempt comes after
    assert not any(w.startswith("Preempt=") for w in high)
    assert found.changes[2].argv[-3:] == ("name=high", "set", "Preempt=low")
    vision = found.changes[4].argv
    assert {"Parent=research", "Cluster=t", "Fairshare=60", "QOS=high,low", "DefaultQOS=low"} <= set(vision)
    assert "GrpTRES=cpu=64,mem=524288" in vision and not any(w.startswith("MaxJobs=") for w in vision)
    alice = found.changes[6].argv
    assert {"Account=vision", "DefaultAccount=vision", "AdminLevel=none", "MaxJobs=1"} <= set(alice)
    assert "DefaultAccount=vision" not in found.changes[7].argv  # the user exists by then
    assert not any(c.tightens for c in found.changes)


def test_a_second_run_changes_nothing() -> None:
    s = spec()
    assert diff(s, live_of(s), "t").empty


def test_limits_changed_both_ways_and_what_tightens() -> None:
    s = spec()
    live = live_of(s)
    alice = live.users[("alice", "vision")]
    live.users[("alice", "vision")] = replace(alice, settings={**alice.settings, "MaxJobs": "5"})
    vision = live.accounts["vision"]
    live.accounts["vision"] = replace(vision, settings={**vision.settings, "GrpTRES": "cpu=32,mem=524288"})
    found = diff(s, live, "t")
    assert shown(found.changes) == ["modify account vision", "modify user alice/vision"]
    account, user = found.changes
    assert account.settings == (("GrpTRES", "cpu=32,mem=524288", "cpu=64,mem=524288"),) and not account.tightens
    assert user.settings == (("MaxJobs", "5", "1"),) and user.tightens
    assert user.argv[2:] == ("modify", "user", "where", "name=alice", "account=vision", "cluster=t", "set", "MaxJobs=1")


def test_a_limit_the_blueprint_drops_is_cleared() -> None:
    s = spec()
    live = live_of(s)
    low = live.qos["low"]
    live.qos["low"] = replace(low, settings={**low.settings, "GrpJobs": "7"})
    (change,) = diff(s, live, "t").changes
    assert change.argv[-2:] == ("set", "GrpJobs=-1") and not change.tightens


def test_a_moved_account_and_a_new_default_account() -> None:
    s = spec()
    live = live_of(s)
    live.accounts["nlp"] = replace(live.accounts["nlp"], parent="root")
    live.default_accounts["alice"] = "nlp"
    found = diff(s, live, "t")
    assert shown(found.changes) == ["modify account nlp", "modify user alice"]
    assert "Parent=research" in found.changes[0].argv
    assert found.changes[1].argv[-2:] == ("set", "DefaultAccount=vision")


def test_what_the_blueprint_does_not_declare_is_reported_or_removed_when_it_owns_the_tree() -> None:
    s = spec()
    live = live_of(s)
    live.accounts["old"] = LiveAssoc("old", "", "root", {})
    live.accounts["old2"] = LiveAssoc("old2", "", "old", {})
    live.users[("carol", "old2")] = LiveAssoc("old2", "carol", "old2", {})
    live.users[("alice", "old")] = LiveAssoc("old", "alice", "old", {})
    live.qos["scavenger"] = LiveQos("scavenger", {})
    kept = diff(s, live, "t")
    assert kept.empty
    assert kept.unmanaged == ("user alice in account old", "user carol in account old2", "account old2",
                              "account old", "qos scavenger")  # fmt: skip
    owned = diff(spec(owns=True), live, "t")
    assert shown(owned.changes) == [
        "delete user alice/old", "delete user carol/old2", "delete account old2", "delete account old",
        "delete qos scavenger",
    ]  # fmt: skip
    assert all(c.tightens for c in owned.changes)
    assert owned.unmanaged == ()  # all of it goes: none is left alone
    assert owned.changes[2].argv[2:] == ("delete", "account", "where", "name=old2", "cluster=t")


def test_parents_come_first_whatever_the_order_declared() -> None:
    tree = {"c": "b", "b": "a", "a": None, "x": "a", "loop1": "loop2", "loop2": "loop1"}
    order = parents_first(tree)
    assert order.index("a") < order.index("b") < order.index("c") and order.index("a") < order.index("x")
    assert sorted(order) == sorted(tree)


def fresh_reads() -> list[tuple[int, str, str]]:
    return [(0, (SLURM / f"sacctmgr-show-{k}-hpckit-format-slurm22.05-lab-default.txt").read_text(), "")
            for k in ("qos", "assoc", "user")]  # fmt: skip


def test_users_without_a_unix_account_are_refused_before_any_change() -> None:
    controller = scripted(
        {"sacctmgr": fresh_reads(), "getent": [(0, "alice:x:4101:4101::/:/bin/sh\n", "")]}, where="ctl"
    )
    login = scripted({"getent": [(2, "", "")]}, where="login")
    with pytest.raises(AccountsRefused, match="no Unix account alice on login; no Unix account bob on login, ctl: an"):
        apply_accounts(spec(), "t", controller, login)
    assert all(c[3] == "show" for c in controller.calls if c[0] == "sacctmgr")  # nothing was changed
    assert login.calls == [("getent", "passwd", "alice", "bob")]


def test_a_user_of_another_uid_on_the_controller_is_refused() -> None:
    both = "alice:x:4101:4101::/:/bin/sh\nbob:x:4102:4102::/:/bin/sh\n"
    controller = scripted({"sacctmgr": fresh_reads(), "getent": [(0, both.replace("4102", "5000"), "")]}, where="ctl")
    login = scripted({"getent": [(0, both, "")]}, where="login")
    with pytest.raises(AccountsRefused, match=r"accounting: bob is uid 4102 on login and 5000 on ctl: an association"):
        apply_accounts(spec(), "t", controller, login)


def test_deletions_are_refused_while_jobs_run_or_wait() -> None:
    s = spec(owns=True)
    live_reads = fresh_reads()
    extra = "old||||1||normal|||||||||\nold|carol|||1||normal|||||||||\n"
    live_reads[1] = (0, live_reads[1][1] + extra, "")
    queue = "41|old|carol|normal|RUNNING\n42|vision|alice|normal|PENDING\n"
    users = "alice:x:4101:4101::/:/bin/sh\nbob:x:4102:4102::/:/bin/sh\n"
    controller = scripted({"sacctmgr": live_reads, "squeue": [(0, queue, "")], "getent": [(0, users, "")]})
    login = scripted({"getent": [(0, users, "")]})
    with pytest.raises(
        AccountsRefused,
        match=r"delete user carol in account old \(jobs 41\); delete account old \(jobs 41\) \(deploy "
        "--cancel-affected-jobs cancels them first\\)",
    ):
        apply_accounts(s, "t", controller, login)
    assert not any(w in ("add", "modify", "delete") for c in controller.calls for w in c)
    assert ("squeue", "--noheader", "--all", "--states=R,PD,CG,S,CF", "--format=%i|%a|%u|%q|%T") in controller.calls


def test_show_commands_ask_for_every_managed_setting() -> None:
    commands = show_commands("t")
    assert commands["assoc"][:7] == ("sacctmgr", "--noheader", "--parsable2", "show", "assoc", "where", "cluster=t")
    assert commands["qos"][-1].startswith("format=Name,Priority,Preempt,PreemptMode,Flags,UsageFactor,GrpTRES,")
    assert commands["user"][-1] == "format=User,DefaultAccount,AdminLevel"


def test_a_sacctmgr_line_of_another_shape_is_an_error_naming_it() -> None:
    with pytest.raises(AccountsError, match=r"sacctmgr show user, line 2: 2 fields, 3 asked: 'bob\|nlp'"):
        parse_live("", "", "alice|vision|None\nbob|nlp\n")


SLURM = Path(__file__).parent / "data" / "slurm"


def recorded_live() -> Live:
    read = {k: (SLURM / f"sacctmgr-show-{k}-hpckit-format-slurm22.05-lab-default.txt").read_text()
            for k in ("qos", "assoc", "user")}  # fmt: skip
    return parse_live(read["qos"], read["assoc"], read["user"])


def test_a_fresh_cluster_as_sacctmgr_shows_it() -> None:
    live = recorded_live()
    assert list(live.qos) == ["normal"] and live.qos["normal"].settings["PreemptMode"] == "cluster"
    assert live.qos["normal"].settings["UsageFactor"] == "1.000000" and live.qos["normal"].settings["MaxWall"] == ""
    assert live.accounts["root"].settings["QOS"] == "normal" and live.accounts["root"].parent == ""
    assert list(live.users) == [("root", "root")] and live.admin_levels == {"root": "administrator"}


def test_a_fresh_cluster_gets_the_tree_and_keeps_slurm_s_own() -> None:
    """Even owning the whole tree, Slurm's normal QOS, root account and root's association stay."""
    found = diff(spec(owns=True), recorded_live(), "labci")
    assert shown(found.changes)[:2] == ["add qos high", "add qos low"] and len(found.changes) == 9
    assert found.unmanaged == ()
    # an unset QOS is what sacctmgr shows for one made with only a priority: nothing to change once it exists
    low = wanted_qos(spec().qos["low"].model_copy(update={"limits": {}}))
    assert {k: v for k, v in low.items() if v} == {
        "Priority": "10",
        "PreemptMode": "cluster",
        "UsageFactor": "1.000000",
    }


def test_accounts_diff_reads_the_cluster_and_lists_the_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hpckit accounts diff`: three sacctmgr reads on the login node, then the changes; changing nothing."""
    from click.testing import CliRunner

    import hpckit.jobs.submit
    from hpckit.cli import cli
    from tests.fakes import scripted

    reads = [(0, (SLURM / f"sacctmgr-show-{k}-hpckit-format-slurm22.05-lab-default.txt").read_text(), "")
             for k in ("qos", "assoc", "user")]  # fmt: skip
    fake = scripted({"sacctmgr": reads})
    monkeypatch.setattr(hpckit.jobs.submit, "transport_for", lambda cluster: fake)
    path = tmp_path / "bp.yaml"
    path.write_text(GOOD + ACCOUNTING)
    result = CliRunner().invoke(cli, ["accounts", "diff", str(path)])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert (
        lines[0] == "add qos high (Priority: - -> 100, PreemptMode: - -> cluster, "
        "Flags: - -> denyonlimit, UsageFactor: - -> 1.000000, MaxWall: - -> 2880, MaxTRESPerUser: - -> gres/gpu=8)"
    )
    assert lines[-1] == "9 change(s)"
    assert [c[4] for c in fake.calls] == ["qos", "assoc", "user"] and all(c[0] == "sacctmgr" for c in fake.calls)
    assert not any(w in ("add", "modify", "delete") for c in fake.calls for w in c)  # it only read


def test_what_sacctmgr_shows_after_the_deploy_applied_it_matches() -> None:
    """Real output after `hpckit deploy` applied ACCOUNTING on a lab: nothing left to change (sacctmgr's own
    spellings: 2-00:00:00 for 2880 minutes, mem=512G for 524288 MB, None/Operator, inherited QOS)."""
    read = {k: (SLURM / f"sacctmgr-show-{k}-hpckit-format-slurm22.05-lab-applied.txt").read_text()
            for k in ("qos", "assoc", "user")}  # fmt: skip
    live = parse_live(read["qos"], read["assoc"], read["user"])
    assert diff(spec(owns=True), live, "acct").empty
    assert live.users[("alice", "vision")].settings["QOS"] == "high,low"  # inherited, and left alone


def job(job_id: str, account: str, user: str, qos: str = "normal", state: str = "RUNNING") -> QueuedJob:
    return QueuedJob(job_id, account, user, qos, state)


def test_the_jobs_a_deletion_or_a_stricter_limit_reaches() -> None:
    tree = {"research": "root", "vision": "research", "nlp": "research", "other": "root"}
    jobs = [job("1", "vision", "alice", "high"), job("2", "nlp", "bob", state="PENDING"), job("3", "other", "carol")]
    research = Change("delete", "account", "research", tightens=True)
    assert [j.job_id for j in affected_jobs(research, jobs, tree)] == ["1", "2"]  # its sub-accounts' too
    assert [j.job_id for j in affected_jobs(Change("delete", "qos", "high", tightens=True), jobs, tree)] == ["1"]
    bob = Change("modify", "user", "bob", "nlp", (("MaxJobs", "", "1"),), tightens=True)
    assert [j.job_id for j in affected_jobs(bob, jobs, tree)] == ["2"]
    assert affected_jobs(Change("modify", "user", "bob", "vision", tightens=True), jobs, tree) == ()
    assert affected_jobs(replace(bob, tightens=False), jobs, tree) == ()  # a looser limit reaches none


def test_plan_reads_the_queue_only_when_a_change_tightens() -> None:
    s = spec()
    loose = scripted({"sacctmgr": fresh_reads()})  # a fresh cluster: only adds
    assert not plan_accounts(s, "t", loose).jobs and all(c[0] == "sacctmgr" for c in loose.calls)
    live_reads = fresh_reads()
    live_reads[1] = (0, live_reads[1][1] + "old||||1||normal|||||||||\n", "")
    queue = "41|old|root|normal|RUNNING\n42|vision|alice|normal|PENDING\n"
    controller = scripted({"sacctmgr": live_reads, "squeue": [(0, queue, "")]})
    planned = plan_accounts(spec(owns=True), "t", controller)
    gone = next(c for c in planned.changes if c.action == "delete")
    assert gone.name == "old" and [j.describe() for j in planned.jobs[gone]] == ["41 (root, running)"]


def test_told_to_the_deletion_cancels_the_jobs_first_then_waits_for_them() -> None:
    live_reads = fresh_reads()
    live_reads[1] = (0, live_reads[1][1] + "old||||1||normal|||||||||\n", "")
    after = [(0, (SLURM / f"sacctmgr-show-{k}-hpckit-format-slurm22.05-lab-default.txt").read_text(), "")
             for k in ("qos", "assoc", "user")]  # fmt: skip
    s = AccountingSpec(owns_tree=True)
    controller = scripted(
        {
            "sacctmgr": [*live_reads, (0, "", ""), *after],
            "squeue": [(0, "41|old|root|normal|RUNNING\n", ""), (0, "41\n", ""), (1, "", "Invalid job id")],
            "scancel": [(0, "", "")],
        }
    )
    login = scripted({})
    applied = apply_accounts(s, "t", controller, login, cancel_jobs=True)
    assert applied.cancelled == ("41",)
    programs = [c[0] if c[0] != "sacctmgr" else next(w for w in c if w in ("show", "delete")) for c in controller.calls]
    assert programs == [
        "show",
        "show",
        "show",
        "squeue",
        "scancel",
        "squeue",
        "squeue",
        "delete",
        "show",
        "show",
        "show",
    ]


RECORDED_EXPORT = """\
accounting:
  qos:
    high:
      priority: 100
      preempt: [low]
      flags: [DenyOnLimit]
      limits: {MaxWall: 2-00:00:00, MaxTRESPerUser: gres/gpu=8}
    low:
      priority: 10
      limits: {MaxJobsPerUser: 2}
  accounts:
    research: {fairshare: 100}
    nlp: {parent: research, fairshare: 40}
    vision:
      parent: research
      fairshare: 60
      default_qos: low
      qos: [high, low]
      limits: {GrpTRES: "cpu=64,mem=524288"}
  users:
    alice:
      default_account: vision
      accounts: [vision, nlp]
      limits: {MaxJobs: 1}
    bob: {default_account: nlp, admin: operator}
"""


def test_the_export_of_a_live_tree_deploys_as_no_change() -> None:
    read = {k: (SLURM / f"sacctmgr-show-{k}-hpckit-format-slurm22.05-lab-applied.txt").read_text()
            for k in ("qos", "assoc", "user")}  # fmt: skip
    live = parse_live(read["qos"], read["assoc"], read["user"])
    exported = export_accounting(live)
    assert exported.notes == ()
    assert exported.accounting == yaml.safe_load(RECORDED_EXPORT)["accounting"]
    text = yaml.safe_dump({"accounting": exported.accounting}, sort_keys=False)
    found = parse_blueprint(GOOD + text, "bp.yaml").accounting
    assert found is not None and diff(found.model_copy(update={"owns_tree": True}), live, "acct").empty


def test_a_fresh_cluster_exports_nothing_and_what_the_blueprint_cannot_say_is_named() -> None:
    assert export_accounting(recorded_live()).accounting == {"qos": {}, "accounts": {}, "users": {}}
    live = recorded_live()
    live.accounts["a"] = LiveAssoc("a", "", "root", {"Fairshare": "1"})
    live.accounts["b"] = LiveAssoc("b", "", "root", {"Fairshare": "1"})
    live.users[("carol", "a")] = LiveAssoc("a", "carol", "", {"Fairshare": "1", "MaxJobs": "2"})
    live.users[("carol", "b")] = LiveAssoc("b", "carol", "", {"Fairshare": "1", "MaxJobs": "5"})
    live.users[("dave", "root")] = LiveAssoc("root", "dave", "", {"Fairshare": "1"})
    live.default_accounts.update(carol="b", dave="root")
    exported = export_accounting(live)
    assert exported.accounting["users"] == {
        "carol": {"default_account": "b", "accounts": ["b", "a"], "limits": {"MaxJobs": 5}}
    }
    assert [n.split(":")[0] for n in exported.notes] == ["user carol", "user dave"]
    assert "differs from the one in b" in exported.notes[0] and "root account is left out" in exported.notes[1]


def test_accounts_export_writes_a_section_a_blueprint_takes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    import hpckit.jobs.submit
    from hpckit.cli import cli

    read = [(0, (SLURM / f"sacctmgr-show-{k}-hpckit-format-slurm22.05-lab-applied.txt").read_text(), "")
            for k in ("qos", "assoc", "user")]  # fmt: skip
    fake = scripted({"sacctmgr": read})
    monkeypatch.setattr(hpckit.jobs.submit, "transport_for", lambda cluster: fake)
    out = tmp_path / "accounting.yaml"
    result = CliRunner().invoke(cli, ["accounts", "export", "--cluster", "acct", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert fake.calls[1][:7] == ("sacctmgr", "--noheader", "--parsable2", "show", "assoc", "where", "cluster=acct")
    bp = parse_blueprint(GOOD + out.read_text(), "bp.yaml")
    assert bp.accounting is not None and set(bp.accounting.users) == {"alice", "bob"}
    assert not any(w in ("add", "modify", "delete") for c in fake.calls for w in c)


def test_planned_lines_show_each_command_and_the_jobs_it_reaches() -> None:
    from hpckit.cli.accounts import planned_json, planned_lines

    gone = Change("delete", "account", "old", argv=("sacctmgr", "--immediate", "delete", "account"), tightens=True)
    planned = Planned((gone,), ("qos x",), {gone: (job("41", "old", "bob"),)})
    assert planned_lines(planned) == [
        "delete account old  (may hold or stop jobs)",
        "    sacctmgr --immediate delete account",
        "    affects 1 job(s): 41 (bob, running)",
        "not in the blueprint, left alone: qos x",
    ]
    assert planned_json(planned)["changes"][0]["jobs"][0]["job_id"] == "41"  # type: ignore[index]
