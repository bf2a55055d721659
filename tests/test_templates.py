"""sbatch templates: declared parameters, typed values, quoting, and what the rendered scripts do when run.

The injection tests here run every rendered script under bash with stand-ins for srun/scontrol/python,
with hostile text in every free-text parameter, and check that nothing the text says ever ran. The lab
tests (test_jobs_lab.py) submit the same values to a real Slurm.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpckit.errors import InputError
from hpckit.jobs.library import Library, read_site_defaults
from hpckit.jobs.params import ParamSpec, Words, bind, parse_sets
from hpckit.jobs.render import Raw, TemplateError, finalize, raw
from hpckit.slurm.directives import read_directives
from tests.hostile import CORPUS, REFUSED, TEXT_TYPES, as_value, render_hostile
from tests.jobutil import cli_with_jobs

TEMPLATES = ["bench-torch", "nccl-tests", "nemo", "run", "torchrun"]


@pytest.fixture(scope="module")
def library() -> Library:
    return Library()


def test_the_shipped_templates_are_all_there(library: Library) -> None:
    assert library.names == TEMPLATES
    for template in library:
        assert template.description
        assert {"nodes", "time", "partition", "job_name", "log_dir"} <= set(template.params)


@pytest.mark.parametrize("name", TEMPLATES)
def test_renders_with_defaults_to_valid_bash(library: Library, name: str, tmp_path: Path) -> None:
    script = library.get(name).render({}).script
    assert script.startswith("#!/bin/bash\n#SBATCH ")
    assert f"--job-name={name}" in script
    path = tmp_path / "job.sh"
    path.write_text(script)
    syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


@pytest.mark.parametrize("name", TEMPLATES)
def test_sbatch_options_come_before_any_command(library: Library, name: str) -> None:
    """sbatch stops reading #SBATCH at the first command line; a late option would be silently ignored."""
    lines = library.get(name).render({"partition": "gpu", "exclusive": "true"}).script.splitlines()[1:]
    first_command = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    assert not any(line.startswith("#SBATCH") for line in lines[first_command:])


def test_torchrun_script(library: Library) -> None:
    script = library.get("torchrun").render({"nodes": "4", "gpus_per_node": "8", "args": "--lr 0.1"}).script
    assert "#SBATCH --ntasks-per-node=1" in script
    assert 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in script
    assert "MASTER_PORT=$((15000 + SLURM_JOB_ID % 17000))" in script
    assert "--nproc-per-node 8" in script
    assert "--rdzv-backend c10d" in script and '--rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT"' in script
    assert "\\$SLURM_PROCID" in script  # evaluated on each node, not by the batch script
    assert "export TORCH_NCCL_ASYNC_ERROR_HANDLING=1" in script
    assert 'SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"' in script
    assert "train.py --lr 0.1" in script
    assert "--container-image" not in script.split("container_args=()")[1].split("\n")[1]
    fixed = library.get("torchrun").render({"port": "29500", "container": "/shared/pt.sqsh"}).script
    assert "MASTER_PORT=29500" in fixed and "--nproc-per-node 1" in fixed
    assert "--container-image=/shared/pt.sqsh --no-container-mount-home" in fixed


def test_nemo_script(library: Library) -> None:
    script = library.get("nemo").render({"overrides": "trainer.max_steps=10 trainer.devices=4"}).script
    for option in ("--ntasks-per-node=8", "--gpus-per-node=8", "--exclusive", "--mem=0"):
        assert f"#SBATCH {option}" in script
    assert "#SBATCH --output=/shared/logs/%x-%j.out" in script
    assert "--container-image='nvcr.io#nvidia/nemo:24.12' --no-container-mount-home" in script
    assert "export PMIX_MCA_gds=hash" in script and "srun --mpi=pmix --ntasks-per-node=8" in script
    # given overrides win; the job supplies the others
    assert "trainer.devices=8" not in script and "trainer.max_steps=10 trainer.devices=4" in script
    assert '"trainer.num_nodes=$SLURM_NNODES"' in script and '"exp_manager.exp_dir=$EXP_DIR"' in script
    assert library.get("nemo").render({}).mkdirs == ("/shared/logs",)


def test_nccl_tests_script(library: Library) -> None:
    values = {"op": "all_gather", "min_bytes": "1M", "max_bytes": "1G", "warmup": "2", "iters": "7", "check": "0"}
    script = library.get("nccl-tests").render(values).script
    assert "srun --mpi=pmix --ntasks-per-node=8 --gpu-bind=none" in script
    assert "/opt/nccl-tests/build/all_gather_perf -g 1" in script
    assert "-b 1M -e 1G -f 2" in script and "-w 2 -n 7 -c 0" in script
    assert 'export NCCL_DEBUG_FILE="$LOG_DIR/nccl-$SLURM_JOB_ID.%h.%p.log"' in script
    with pytest.raises(InputError, match="gpus_per_node must be at least 1"):
        library.get("nccl-tests").render({"gpus_per_node": "0"})


# --- parameters -----------------------------------------------------------------------------------------


def spec(type_: str, default: object = "", **extra: object) -> ParamSpec:
    return ParamSpec.model_validate({"name": "x", "type": type_, "default": default, "help": "h", **extra})


@pytest.mark.parametrize(
    ("type_", "raw_value", "expected"),
    [
        ("int", "4", 4),
        ("int", " -3 ", -3),
        ("float", "2.5", 2.5),
        ("bool", "yes", True),
        ("bool", "OFF", False),
        ("str", "a b;c", "a b;c"),
        ("path", "/shared/x y", "/shared/x y"),
        ("hostlist", "node1,node2,node3", "node[1-3]"),
        ("hostlist", "gpu[01-02],login", "gpu[01-02],login"),
        ("duration", "30", "30"),
        ("duration", "1-12:00:00", "1-12:00:00"),
        ("duration", "UNLIMITED", "UNLIMITED"),
        ("args", "a 'b c' $(d)", ("a", "b c", "$(d)")),
    ],
)
def test_parameter_types_accept(type_: str, raw_value: str, expected: object) -> None:
    assert spec(type_).convert(raw_value) == expected


@pytest.mark.parametrize(
    ("type_", "raw_value", "message"),
    [
        ("int", "4.5", "is not an integer"),
        ("int", "", "is not an integer"),
        ("float", "nan", "is not a finite number"),
        ("bool", "maybe", "is not a boolean"),
        ("str", "a\nb", "contains a newline"),
        ("path", "x\x00", "contains a NUL byte"),
        ("path", " /x", "leading or trailing spaces"),
        ("hostlist", "node[1-", "is not a host list"),
        ("hostlist", "node1;reboot", "is not a host list"),
        ("duration", "1h", "is not a Slurm time"),
        ("duration", "$(x)", "is not a Slurm time"),
        ("args", "a 'b", "cannot be split"),
        ("args", "a\nb", "contains a newline"),
    ],
)
def test_parameter_types_reject(type_: str, raw_value: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        spec(type_).convert(raw_value)
    assert "\n" not in str(caught.value)


def test_ranges_choices_and_patterns() -> None:
    with pytest.raises(InputError, match="below the minimum 1"):
        spec("int", 1, min=1).convert("0")
    with pytest.raises(InputError, match="above the maximum 65535"):
        spec("int", 1, max=65535).convert("70000")
    with pytest.raises(InputError, match="did you mean all_reduce"):
        spec("choice", "all_reduce", choices=["all_reduce", "all_gather"]).convert("allreduce")
    with pytest.raises(InputError, match="does not match"):
        spec("str", pattern=r"^[a-z]+$").convert("gpu;x")
    assert spec("str", pattern=r"^[a-z]+$").convert("") == ""  # empty means "not set"


def test_unknown_parameter_is_rejected_with_a_suggestion(library: Library) -> None:
    with pytest.raises(InputError, match=r"template torchrun has no parameter 'nodse'; did you mean nodes"):
        library.get("torchrun").bind({"nodse": "2"})


def test_parse_sets() -> None:
    assert parse_sets(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(InputError, match="expected KEY=VALUE"):
        parse_sets(["nodes"])


def test_bind_checks_defaults_and_given_values() -> None:
    specs = {"n": spec("int", 2).model_copy(update={"name": "n"})}
    assert bind("t", specs, {}) == {"n": 2}
    with pytest.raises(InputError, match="template t: parameter n: 'x' is not an integer"):
        bind("t", specs, {"n": "x"})


# --- quoting ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["$(touch /tmp/x)", "`id`", "a;b", "it's", 'say "hi"', "", "*", "~root", "a b"])
def test_finalize_quotes_every_text_value(text: str) -> None:
    assert shlex.split(finalize(text)) == [text]


def test_finalize_numbers_words_and_refusals() -> None:
    assert finalize(8) == "8" and finalize(0.5) == "0.5" and finalize(True) == "true"
    assert finalize(Words(["a b", "$x"])) == "'a b' '$x'"
    assert finalize(Words()) == ""
    assert raw(8) == Raw("8")
    with pytest.raises(TemplateError, match="takes a number"):
        raw("$(x)")
    with pytest.raises(TemplateError, match="only parameters, text and numbers print"):
        finalize(None)


def _broken(tmp_path: Path, body: str) -> Library:
    (tmp_path / "t.sbatch.j2").write_text(body)
    return Library([tmp_path])


def test_template_authoring_errors_are_caught_at_load(tmp_path: Path) -> None:
    header = "{#- hpckit\nparams:\n  a: {type: int, default: 1, help: h}\n-#}\n#!/bin/bash\n"
    with pytest.raises(TemplateError, match="undeclared parameter"):
        _broken(tmp_path, header + "echo {{ p.a }} {{ p.b }}\n").get("t")
    with pytest.raises(TemplateError, match="never uses: a"):
        _broken(tmp_path, header + "echo hi\n").get("t")
    with pytest.raises(TemplateError, match="no parameter header"):
        _broken(tmp_path, "#!/bin/bash\n").get("t")
    with pytest.raises(TemplateError, match="parameter 'a'"):
        bad_default = header.replace("default: 1", "default: one")
        _broken(tmp_path, bad_default + "echo {{ p.a }}\n").get("t")
    with pytest.raises(TemplateError, match=r"t.sbatch.j2:\d+"):
        _broken(tmp_path, header + "{% if %}\n").get("t")


def test_template_file_path_and_site_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    header = "{#- hpckit\ndescription: mine\nparams:\n  w: {type: str, default: hi, help: h}\n-#}\n"
    body = header + "#!/bin/sh\necho {{ p.w }}\n"
    (tmp_path / "mine.sbatch.j2").write_text(body)
    assert Library().get(str(tmp_path / "mine.sbatch.j2")).render({"w": "a b"}).script == "#!/bin/sh\necho 'a b'\n"
    monkeypatch.setenv("HPCKIT_TEMPLATE_PATH", str(tmp_path))
    assert "mine" in Library().names


# --- hostile values, executed -------------------------------------------------------------------------------

STUBS = {
    # srun: drop its own options, then run the command as a task would (with a task rank).
    "srun": 'while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done\nSLURM_PROCID=0 exec "$@"\n',
    "scontrol": "echo node1\n",
    "python": 'printf "%s\\n" "$@" >> "$ARGV_LOG"\n',
    "python3": 'printf "%s\\n" "$@" >> "$ARGV_LOG"\n',
}


def _stub_bin(tmp: Path) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _run(script: str, tmp: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    path = tmp / "job.sh"
    path.write_text(script)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "ARGV_LOG": str(tmp / "argv.log"),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "t",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_NNODES": "1",
        "SLURM_SUBMIT_DIR": str(tmp),
        "HOME": str(tmp),
    }
    return subprocess.run(["bash", str(path)], cwd=tmp, env=env, capture_output=True, text=True, timeout=20)


@pytest.mark.parametrize("payload", CORPUS)
@pytest.mark.parametrize("name", TEMPLATES)
def test_hostile_values_never_execute(library: Library, name: str, payload: str, tmp_path: Path) -> None:
    """Every text parameter holds the payload (a relative marker: the script runs in tmp_path); the
    script runs under bash with stand-ins for srun and python; nothing the payload says ever runs, and
    sbatch would read exactly the options the template wrote."""
    fixed = {"log_dir": str(tmp_path / "logs"), "python": "python3", "container": ""}
    template = library.get(name)
    fixed = {k: v for k, v in fixed.items() if k in template.params}
    rendered, values, refused = render_hostile(template, payload, fixed, lambda _: "INJECTED")
    assert set(refused) <= {"job_name", "log_dir", "program", "script", "bin_dir", "exp_dir", "command"}, refused
    (component,) = read_directives(rendered.script)
    if "job_name" in values:
        assert f"--job-name={values['job_name']}" in component
    names = [arg.split("=", 1)[0] for arg in component]
    assert all(n.startswith("--") for n in names) and len(names) == len(set(names)), component
    assert not {"--account", "--qos", "--uid", "--wrap"} & set(names), component
    if "sbatch_options" in values:
        assert f"--comment={payload.format(m='INJECTED')}" in component
    done = _run(rendered.script, tmp_path, _stub_bin(tmp_path))
    assert not (tmp_path / "INJECTED").exists(), f"{name}: {payload!r} executed\n{done.stdout}\n{done.stderr}"
    if name in ("torchrun", "nemo"):
        # The script/args values arrived at the program as literal words, untouched.
        argv = (tmp_path / "argv.log").read_text().splitlines()
        assert payload.format(m="INJECTED") in argv, argv


@pytest.mark.parametrize("text", REFUSED)
@pytest.mark.parametrize("name", TEMPLATES)
def test_unwritable_text_is_refused_naming_the_parameter(library: Library, name: str, text: str) -> None:
    template = library.get(name)
    for param, spec in template.params.items():
        if spec.type in TEXT_TYPES and not spec.pattern:
            with pytest.raises(InputError, match=f"parameter {param}: .*(contains|single-line|not UTF-8)") as caught:
                template.render({param: as_value(spec.type, text)})
            assert "\n" not in str(caught.value)


def test_a_shell_quoted_job_name_would_add_options_sbatch_reads() -> None:
    """The hole this closes: sbatch reads a backslash as an escape inside single quotes, so a job name
    quoted for a shell carries options of its own past the quoting."""
    name = "x\\'\"'\" --account=evil --uid=0 \\'"
    (shell_quoted,) = read_directives(f"#!/bin/bash\n#SBATCH --job-name={shlex.quote(name)}\n")
    assert "--account=evil" in shell_quoted and "--uid=0" in shell_quoted
    line = Library().get("run").render({"job_name": name}).script.splitlines()[1]
    assert read_directives(line) == [[f"--job-name={name}"]]


def test_program_and_path_values_may_not_start_with_a_dash(library: Library) -> None:
    for name, param, value in [
        ("torchrun", "python", "--version"),
        ("torchrun", "script", "-c"),
        ("nemo", "script", "-m"),
        ("nccl-tests", "bin_dir", "-x"),
        ("bench-torch", "program", "--help"),
        ("run", "command", "--uid=0 hostname"),
    ]:
        with pytest.raises(InputError, match=f"parameter {param}: .*starts with '-'"):
            library.get(name).render({param: value})
    assert "srun ./-x" in library.get("run").render({"command": "./-x"}).script


@pytest.mark.parametrize("name", TEMPLATES)
def test_env_on_every_template_takes_key_value_settings_only(library: Library, name: str) -> None:
    script = library.get(name).render({"env": "NCCL_ALGO=Ring 'NCCL_DEBUG_SUBSYS=INIT,NET' X="}).script
    assert "export NCCL_ALGO=Ring\nexport NCCL_DEBUG_SUBSYS=INIT,NET\nexport X=\n" in script
    for bad in ("-p", "-f=x", "1X=2", "NOEQUALS", "A-B=1", "=x"):
        with pytest.raises(InputError, match=r"parameter env: .*is not a KEY=VALUE setting"):
            library.get(name).render({"env": bad})


# --- the commands ------------------------------------------------------------------------------------------


def test_cli_bad_parameter_is_one_line_and_exit_2() -> None:
    runner = CliRunner()
    for args in (["render", "torchrun", "-s", "nodes=two"], ["render", "torchrun", "-s", "nodse=2"]):
        result = runner.invoke(cli_with_jobs(), args)
        assert result.exit_code == 2, result.output
        assert result.output.count("\n") == 1 and result.output.startswith("hpckit: error: ")
    result = runner.invoke(cli_with_jobs(), ["render", "torchrun", "-s", "job_name=a\nb"])
    assert result.exit_code == 2 and result.output.count("\n") == 1


def test_cli_render_list_show(tmp_path: Path) -> None:
    runner = CliRunner()
    listed = runner.invoke(cli_with_jobs(), ["templates", "list"])
    assert listed.exit_code == 0 and all(name in listed.output for name in TEMPLATES)
    shown = runner.invoke(cli_with_jobs(), ["templates", "show", "nccl-tests"])
    assert shown.exit_code == 0 and "step_factor" in shown.output and "all_reduce" in shown.output
    out = tmp_path / "job.sh"
    rendered = runner.invoke(cli_with_jobs(), ["render", "run", "-s", "command=echo hi", "-o", str(out)])
    assert rendered.exit_code == 0 and "srun echo hi\n" in out.read_text()
    assert os.access(out, os.X_OK)


def test_site_defaults_apply_to_every_template_declaring_the_parameter(tmp_path: Path) -> None:
    library = Library(site_defaults={"python": "/opt/torch/bin/python", "omp_threads": 4, "not_a_param": 1})
    assert "/opt/torch/bin/python -m torch.distributed.run" in library.get("torchrun").render({}).script
    assert "export OMP_NUM_THREADS=4" in library.get("run").render({}).script
    assert "python3 -m" in Library().get("torchrun").render({}).script
    with pytest.raises(TemplateError, match=r"template-defaults\.yaml: parameter 'omp_threads'"):
        Library(site_defaults={"omp_threads": "many"}).get("run")
    assert read_site_defaults("python: /x/python\n") == {"python": "/x/python"} and read_site_defaults(None) == {}
    with pytest.raises(TemplateError, match="expected a mapping"):
        read_site_defaults("- a\n")


def test_with_a_cluster_the_login_nodes_site_defaults_are_read() -> None:
    from hpckit.jobs.submit import library_for
    from hpckit.slurm.jobs import CliBackend, Jobs
    from tests.test_jobs import ScriptedTransport

    transport = ScriptedTransport({"cat": [(0, "python: /shared/venv/bin/python\n", "")]})
    library = library_for(Jobs(CliBackend(transport), transport))
    assert transport.calls == [("cat", "--", "/etc/hpckit/template-defaults.yaml")]
    assert "/shared/venv/bin/python -m" in library.get("torchrun").render({}).script
    missing = ScriptedTransport({"cat": [(1, "", "cat: /etc/hpckit/template-defaults.yaml: No such file\n")]})
    assert library_for(Jobs(CliBackend(missing), missing)).site_defaults == {}


def test_the_lab_writes_a_python_with_torch_as_the_default() -> None:
    """The hpckit_login role, shared mode (the lab): `python` is the deploying interpreter, which has torch."""
    role = Path(__file__).resolve().parent.parent / "ansible" / "roles" / "hpckit_login"
    assert "hpckit_python if hpckit_install_mode == 'shared'" in (role / "vars" / "main.yml").read_text()
    assert "template-defaults.yaml" in (role / "tasks" / "main.yml").read_text()


@pytest.mark.parametrize("name", ["torchrun", "nemo"])
def test_the_warning_signal_reaches_every_rank_then_the_job_requeues(
    library: Library, name: str, tmp_path: Path
) -> None:
    """Slurm's warning (USR1 to the batch shell, --signal=B:USR1@N) becomes SIGTERM for the step's ranks
    (a stand-in rank that saves on SIGTERM), and the script requeues its job once they have ended."""
    bin_dir = _stub_bin(tmp_path)
    rank = 'trap \'echo saved >> "$ARGV_LOG"; exit 0\' TERM\necho $$ > "$ARGV_LOG.pid"\n'
    rank += 'echo started >> "$ARGV_LOG"\nwhile :; do sleep 0.05; done\n'
    for program in ("python", "python3"):
        (bin_dir / program).write_text("#!/bin/bash\n" + rank)
    (bin_dir / "scontrol").write_text('#!/bin/bash\necho "scontrol $*" >> "$ARGV_LOG"\necho node1\n')
    # scancel --signal=TERM JOB signals the job's steps (here: the one rank), not the batch script
    scancel = 'echo "scancel $*" >> "$ARGV_LOG"\nkill -TERM "$(cat "$ARGV_LOG.pid")"\n'
    (bin_dir / "scancel").write_text("#!/bin/bash\n" + scancel)
    (bin_dir / "scancel").chmod(0o755)
    values = {"log_dir": str(tmp_path / "logs"), "container": "", "signal_before_end": "90"}
    script = library.get(name).render(values).script
    assert "#SBATCH --signal=B:USR1@90" in script and "#SBATCH --requeue" in script
    (tmp_path / "job.sh").write_text(script)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ARGV_LOG": str(tmp_path / "argv.log"), "SLURM_JOB_ID": "4242",
           "SLURM_JOB_NAME": "t", "SLURM_JOB_NODELIST": "node1", "SLURM_NNODES": "1", "HOME": str(tmp_path),
           "SLURM_SUBMIT_DIR": str(tmp_path)}  # fmt: skip
    job = subprocess.Popen(["bash", str(tmp_path / "job.sh")], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "argv.log"
    for _ in range(200):
        if log.exists() and "started" in log.read_text():
            break
        time.sleep(0.05)
    job.send_signal(signal.SIGUSR1)
    _, stderr = job.communicate(timeout=20)
    assert job.returncode == 0, stderr
    lines = log.read_text().splitlines()
    assert lines[-3:] == ["scancel --signal=TERM 4242", "saved", "scontrol requeue 4242"], (lines, stderr)
    assert "SIGTERM to every rank" in stderr and "requeueing job 4242" in stderr


def test_sbatch_lines_with_values_must_be_written_by_sbatch(tmp_path: Path) -> None:
    header = "{#- hpckit\nparams:\n  x: {type: str, default: a, help: h}\n-#}\n#!/bin/bash\n"
    literal = _broken(tmp_path, header + '#SBATCH --exclusive\n{{ sbatch("comment", p.x) }}\necho {{ p.x }}\n')
    assert literal.get("t").render({"x": "it's"}).script.splitlines()[1:3] == [
        "#SBATCH --exclusive",
        '#SBATCH --comment="it\'s"',
    ]
    by_hand = _broken(tmp_path, header + "#SBATCH --comment={{ p.x }}\necho hi\n")
    with pytest.raises(TemplateError, match=r"an #SBATCH line with a value in it: write it with \{\{ sbatch"):
        by_hand.get("t").render({})
    twice = _broken(tmp_path, header + '{{ sbatch("comment", p.x) }}\n{{ sbatch("comment", "b") }}\necho {{ p.x }}\n')
    with pytest.raises(InputError, match="--comment is set twice: by parameter x and by the template itself"):
        twice.get("t").render({})
