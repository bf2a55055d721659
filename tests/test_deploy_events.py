"""Runner events -> tallies, failures and diffs (event shapes as ansible-runner emits them)."""

from __future__ import annotations

from hpckit.deploy.events import Tracker


def ev(kind: str, host: str = "node1", task: str = "t", **res: object) -> dict[str, object]:
    return {"event": kind, "event_data": {"host": host, "task": task, "res": res}}


def test_tallies_failures_and_censored_messages() -> None:
    tr = Tracker()
    tr.expect_hosts(["ctl", "node1", "node2"])
    tr.feed({"event": "playbook_on_play_start", "event_data": {"play": "compute"}})
    tr.feed(ev("runner_on_ok", changed=True))
    tr.feed(ev("runner_on_ok", host="ctl"))
    tr.feed(ev("runner_on_skipped", host="ctl"))
    tr.feed(ev("runner_on_failed", task="munge key", censored="the output has been hidden due to no_log"))
    tr.feed(ev("runner_on_unreachable", host="node2", task="Gathering Facts", msg="ssh: connect refused"))
    tr.feed({"event": "runner_on_failed", "event_data": {"host": "ctl", "task": "x", "ignore_errors": True}})
    assert tr.current_play == "compute"
    assert tr.hosts["node1"].as_dict() == {"ok": 1, "changed": 1, "failed": 1, "unreachable": 0, "skipped": 0}
    assert tr.hosts["node2"].unreachable == 1 and tr.hosts["ctl"].failed == 0
    assert [str(f) for f in tr.failures] == [
        "node1: failed at task 'munge key': the output has been hidden due to no_log",
        "node2: unreachable at task 'Gathering Facts': ssh: connect refused",
    ]
    assert not tr.ok and tr.changed_total() == 1


def test_diffs_are_collected() -> None:
    tr = Tracker()
    diff = {"before": "a\n", "after": "b\n", "before_header": "/etc/slurm/slurm.conf", "after_header": "/tmp/x.j2"}
    tr.feed(ev("runner_on_ok", host="ctl", task="slurm.conf", changed=True, diff=[diff]))
    tr.feed(ev("runner_on_ok", host="ctl", task="same", diff={"before": "x", "after": "x"}))
    assert [(d.host, d.path) for d in tr.diffs] == [("ctl", "/etc/slurm/slurm.conf")]


def test_diffs_of_new_files_and_loops() -> None:
    tr = Tracker()
    new_file = {"before": "", "after": "x\n", "before_header": "/dev/null", "after_header": "/tmp/t.j2"}
    args = {"invocation": {"module_args": {"dest": "/etc/nccl.conf"}}}
    tr.feed(ev("runner_on_ok", host="n1", task="nccl.conf", changed=True, diff=[new_file], **args))
    line = {"before": "a\n", "after": "a\nb\n", "before_header": "/etc/fstab"}
    tr.feed(ev("runner_on_ok", host="n1", task="fstab", changed=True, results=[{"diff": [line], "changed": True}]))
    assert [(d.path, d.after) for d in tr.diffs] == [("/etc/nccl.conf", "x\n"), ("/etc/fstab", "a\nb\n")]


def test_a_failed_task_shows_the_tail_of_what_it_printed() -> None:
    tr = Tracker()
    stderr = "\n".join(f"line {i}" for i in range(20)) + "\nsbatch: error: Batch job submission failed: Invalid account"
    tr.feed(
        ev(
            "runner_on_failed",
            host="login",
            task="Queue the next nightly sweep job",
            msg="non-zero return code",
            rc=1,
            stderr=stderr,
            stdout="",
        )
    )
    tr.feed(
        ev(
            "runner_on_failed",
            host="ctl",
            task="x",
            msg="non-zero return code",
            rc=2,
            stderr="",
            stdout="ERROR: /shared/venv/bin/python: not found",
        )
    )
    first, second = (str(f) for f in tr.failures)
    assert "non-zero return code" in first and "Invalid account" in first and "line 13" in first
    assert "line 12" not in first  # a tail, not the whole log
    assert second.endswith("stdout: ERROR: /shared/venv/bin/python: not found")


def test_restarts_applied_are_collected() -> None:
    tr = Tracker()
    svc = {"invocation": {"module_args": {"name": "slurmd", "state": "restarted"}}}
    started = {"invocation": {"module_args": {"name": "munge", "state": "started"}}}
    reconf = {"invocation": {"module_args": {"argv": ["scontrol", "reconfigure"]}}}
    for host, res in (("node1", svc), ("node2", started), ("ctl", reconf)):
        tr.feed(
            {
                "event": "runner_on_ok",
                "event_data": {
                    "host": host,
                    "task": "t",
                    "task_action": "ansible.builtin.service" if host != "ctl" else "ansible.builtin.command",
                    "res": {"changed": True, **res},
                },
            }
        )
    assert tr.restarts == [("node1", "slurmd restarted"), ("ctl", "scontrol reconfigure")]
