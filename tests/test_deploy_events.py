"""Runner events -> tallies, failures and diffs (event shapes as ansible-runner emits them)."""

from __future__ import annotations

from hpckit.deploy.events import Tracker, explain_failures


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


# A runner_on_failed event as ansible-runner emitted it for `apt: name=... update_cache=true` on a lab node
# that cannot resolve its mirror's name (ansible-core 2.19.14; module_args and event fields cut to those that
# matter). python-apt raises FetchFailedException() without text, so nothing follows the colon.
APT_CACHE_FAILED = {
    "event": "runner_on_failed",
    "event_data": {
        "task": "Install the Slurm client tools",
        "task_action": "ansible.builtin.apt",
        "host": "node1",
        "res": {
            "msg": "Failed to update apt cache after 5 retries: ",
            "invocation": {"module_args": {"cache_valid_time": 1, "update_cache": True, "update_cache_retries": 5}},
            "changed": False,
            "exception": "(traceback unavailable)",
            "_ansible_no_log": False,
            "warnings": [
                "Failed to update cache after 1 retries due to , retrying",
                "Sleeping for 2 seconds, before attempting to refresh the cache again",
                "Failed to update cache after 5 retries due to , retrying",
                "Sleeping for 13 seconds, before attempting to refresh the cache again",
            ],
        },
        "ignore_errors": None,
    },
}
# `LANG=C apt-get -q update` on that node (the mirror's name replaced).
APT_UPDATE_OUTPUT = """\
Ign:1 http://mirror.invalid/debian bookworm InRelease
Ign:2 http://mirror.invalid/debian bookworm-updates InRelease
Err:1 http://mirror.invalid/debian bookworm InRelease
  Could not resolve 'mirror.invalid'
Err:2 http://mirror.invalid/debian bookworm-updates InRelease
  Could not resolve 'mirror.invalid'
Reading package lists...
W: Failed to fetch http://mirror.invalid/debian/dists/bookworm/InRelease  Could not resolve 'mirror.invalid'
W: Failed to fetch http://mirror.invalid/debian/dists/bookworm-updates/InRelease  Could not resolve 'mirror.invalid'
W: Some index files failed to download. They have been ignored, or old ones used instead.
"""


def test_a_failed_apt_cache_update_shows_apts_own_lines() -> None:
    tr = Tracker()
    tr.feed(APT_CACHE_FAILED)
    tr.feed(ev("runner_on_failed", host="ctl", task="x", msg="non-zero return code", rc=1, stderr="boom"))
    asked: list[str] = []

    def apt_update(host: str) -> str:
        asked.append(host)
        return APT_UPDATE_OUTPUT

    apt, other = (str(f) for f in explain_failures(tr.failures, apt_update))
    assert asked == ["node1"]  # only the failure that lacks its cause is read again
    assert apt.startswith("node1: failed at task 'Install the Slurm client tools': Failed to update apt cache")
    assert "W: Failed to fetch http://mirror.invalid/debian/dists/bookworm/InRelease  Could not resolve" in apt
    assert apt.endswith("W: Some index files failed to download. They have been ignored, or old ones used instead.")
    assert "Ign:" not in apt and "Reading package lists" not in apt
    assert other == "ctl: failed at task 'x': non-zero return code\nstderr: boom"


def test_apt_lines_that_cannot_be_read_say_why() -> None:
    tr = Tracker()
    tr.feed(APT_CACHE_FAILED)
    (failure,) = explain_failures(tr.failures, lambda host: "(not read: ssh: connect to host node1: refused)")
    assert str(failure).endswith("apt-get update: (not read: ssh: connect to host node1: refused)")
