"""Ctrl-C during `hpckit deploy`: the playbook stops mid-way, deploy exits non-zero saying it was interrupted,
and no Ansible process, task process or private data dir outlives it.

The deploy is the real command in a process of its own, with a real ansible-playbook; only the playbook folder is
a slow one of this test's (on localhost, connection local: nothing leaves the machine).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a real ansible-playbook run: ~20 s

# The command of the slow task: a duration no other process on the box uses, so it can be found (and only it).
SLOW = "317.25"

SLOW_PLAYBOOK = f"""\
- name: Slow play
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Say the run has started
      ansible.builtin.command: touch {{{{ lookup('env', 'HPCKIT_TEST_MARKER') }}}}
      changed_when: true
    - name: Take long
      ansible.builtin.command: sleep {SLOW}
      changed_when: true
    - name: Never reached
      ansible.builtin.command: touch {{{{ lookup('env', 'HPCKIT_TEST_MARKER') }}}}.after
      changed_when: true
"""

# The real CLI, with the runner's playbook folder swapped for the slow one (argv[1]).
DEPLOY = """\
import sys
from pathlib import Path

import hpckit.deploy.runner as runner

folder = Path(sys.argv.pop(1))
runner.ansible_dir = lambda: folder
from hpckit.cli import main

sys.argv[0] = "hpckit"
main()
"""


def _processes_running(word: str) -> list[str]:
    """Command lines of this machine's processes that contain ``word``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if word in cmdline:
                found.append(f"{proc.name}: {cmdline}")
    return found


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"deploy ended before its playbook started (rc {proc.returncode}):\n{out}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the playbook did not start in {timeout} s")
        time.sleep(0.1)


def test_ctrl_c_stops_a_running_deploy_and_leaves_nothing(repo: Path, tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the deploy process only: runner starts ansible-playbook in a session of its
    own, so the cancel callback is what must carry it to Ansible."""
    play = tmp_path / "ansible"
    play.mkdir()
    (play / "site.yml").write_text(SLOW_PLAYBOOK)
    (play / "ansible.cfg").write_text("[defaults]\nstdout_callback = default\n")
    (tmp_path / "tmp").mkdir()
    script = tmp_path / "deploy.py"
    script.write_text(DEPLOY)
    marker = tmp_path / "started"
    env = {
        **os.environ,
        "HPCKIT_STATE": str(tmp_path / "state"),
        "TMPDIR": str(tmp_path / "tmp"),  # where the runner's private data dir goes
        "HPCKIT_TEST_MARKER": str(marker),
    }
    # Without containers: deploy would fetch enroot and pyxis from their release URLs before the playbook.
    blueprint = tmp_path / "h100-ib.yaml"
    text = (repo / "blueprints" / "h100-ib.yaml").read_text()
    blueprint.write_text(text.replace("containers:\n  enabled: true", "containers:\n  enabled: false"))
    assert "containers:\n  enabled: false" in blueprint.read_text()
    argv = [sys.executable, str(script), str(play), "deploy", "-q", str(blueprint)]
    proc = subprocess.Popen(
        argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        _wait_for(marker, proc, timeout=120)
        deadline = time.monotonic() + 30
        while not _processes_running(f"sleep {SLOW}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes_running(f"sleep {SLOW}"), "the slow task never started"
        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # the deploy's process group, as a terminal does
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = out + err
    print(f"deploy ended {time.monotonic() - started:.1f} s after SIGINT")
    assert proc.returncode == 130, text  # 128 + SIGINT
    assert "interrupted" in text.lower() and "Traceback" not in text, text
    assert not Path(f"{marker}.after").exists(), "the play went on after Ctrl-C"
    time.sleep(1)  # what was killed has a moment to be reaped
    assert _processes_running(f"sleep {SLOW}") == [], "the interrupted task's process outlived the deploy"
    assert _processes_running(str(play)) == [], "an Ansible process outlived the deploy"
    assert list((tmp_path / "tmp").glob("hpckit-runner-*")) == [], "the runner's private data dir stayed"
