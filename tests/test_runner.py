"""The runner (reproduce/runner.py): units side by side in local processes or Ray tasks give the
numbers of one local run, and a unit killed with its worker is retried from its checkpoint."""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from reproduce import runner
from reproduce.__main__ import _own_folders

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEEDS_RAY = "ray is not installed (pip install -e .[cluster])"

# Imported by every Python process of a run (PYTHONPATH): a unit's process (python -m reproduce
# ... --only UNIT) kills itself, or its parent (a Ray worker), right after its first checkpoint
# (once per unit), and every checkpoint loaded is recorded with the unit process's threads.
KILL_HOOK = """
import json, os, signal, sys, time
from reproduce import common

_save, _load, _dir = common.Checkpoint.save, common.Checkpoint.load, os.environ["KILL_HOOK_DIR"]

def _record(**what):
    with open(os.path.join(_dir, "events.jsonl"), "a") as f:
        f.write(json.dumps(what) + "\\n")

def _unit():
    return sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None

def save(self, state):
    _save(self, state)
    marker = os.path.join(_dir, f"{_unit()}.killed")
    if _unit() and not os.path.exists(marker):
        open(marker, "w").close()
        if os.environ["KILL_HOOK"] == "parent":
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(2)  # the parent's death kills this process first
            _record(unit=_unit(), survived_its_worker=True)
        os.kill(os.getpid(), signal.SIGKILL)

def load(self, *args, **kwargs):
    state = _load(self, *args, **kwargs)
    if state is not None and _unit():
        _record(unit=_unit(), file=os.path.basename(self.path), step=state["step"],
                threads=[os.environ.get(v) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                     "GPU_DYNAMICS_THREADS")])
    return state

common.Checkpoint.save, common.Checkpoint.load = save, load
"""


def reproduce(tmp, name, *flags, env=None):
    """python -m reproduce NAME --smoke in tmp's folders; the results' numbers (no timings)."""
    out = subprocess.run([sys.executable, "-m", "reproduce", name, "--smoke", "--out",
                          str(tmp / "out"), "--checkpoint-dir", str(tmp / "ckpt"), *flags],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, **(env or {})))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with open(tmp / "out" / "results.json") as f:
        return numbers(json.load(f)["results"])


def numbers(tree):
    """The results without what is measured in seconds."""
    if isinstance(tree, dict):
        return {k: numbers(v) for k, v in tree.items() if "second" not in k}
    if isinstance(tree, list):
        return [numbers(v) for v in tree]
    return tree


@pytest.fixture(scope="module")
def local_numbers(tmp_path_factory):
    """The numbers of each experiment run with --executor local (computed once)."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = reproduce(tmp_path_factory.mktemp(f"local_{name}"), name,
                                    "--executor", "local")
        return cache[name]
    return get


def with_kill_hook(tmp_path, victim):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(KILL_HOOK))
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path, "KILL_HOOK": victim, "KILL_HOOK_DIR": str(hook)}


def events(tmp_path):
    with open(tmp_path / "hook" / "events.jsonl") as f:
        return [json.loads(line) for line in f]


def test_units_run_with_resume_the_drivers_folders_and_their_declared_threads(tmp_path):
    argv = ["--smoke", "--checkpoint-dir", str(tmp_path / "ckpt")]
    units, run = runner.plan("spirals", argv)
    assert [u.name for u in units] == runner.importlib.import_module(
        "reproduce.spirals.experiment").units(run)
    unit = units[0]
    assert unit.threads == 1 and not unit.gpu and unit.ckpt_dir == str(tmp_path / "ckpt")
    assert unit.argv[-5:] == ("--weights-dir", run.weights_dir, "--resume", "--only", unit.name)
    assert ("--out", run.out_dir) == unit.argv[unit.argv.index("--out"):][:2]
    units, run = runner.plan("spirals", argv + ["--only", "rnn_n30_seed0", "rnn_n50_seed0"])
    assert [u.name for u in units] == ["rnn_n30_seed0", "rnn_n50_seed0"] and run.partial
    mnist, _ = runner.plan("mnist", ["--smoke"])
    assert {(u.threads, u.gpu) for u in mnist} == {(2, True)}
    # a driver given --resume passes it on once (the commands the results record read as given)
    units, _ = runner.plan("spirals", argv + ["--resume", "--only", "rnn_n30_seed0"])
    assert units[0].argv.count("--resume") == 1 and units[0].argv[-3] == "--resume"


def test_an_abbreviated_flag_is_a_usage_error(tmp_path):
    # the runner rewrites flags by their full names (--resume passed once, folders made
    # absolute): an abbreviation such as --resum or --checkpoint would slip past it
    for flags in (["--resum"], ["--checkpoint", str(tmp_path)], [f"--ou={tmp_path}"]):
        with pytest.raises(SystemExit) as stop:
            runner.plan("spirals", ["--smoke", *flags])
        assert stop.value.code == 2
    units, _ = runner.plan("spirals", ["--smoke", "--resume", "--checkpoint-dir", str(tmp_path)])
    assert units[0].ckpt_dir == str(tmp_path)
    from reproduce import report  # the project's one parser class: the report's alike
    with pytest.raises(SystemExit) as stop:
        report.main(["--no-read"])
    assert stop.value.code == 2


def test_the_evaluation_command_resumes_once(monkeypatch):
    started = []
    monkeypatch.setattr(runner.subprocess, "Popen", lambda cmd, **kw: started.append(cmd))
    runner.evaluate("cnf", ["--full", "--resume"])
    runner.evaluate("cnf", ["--full"])
    assert [cmd[3:] for cmd in started] == [["cnf", "--full", "--resume"]] * 2


def test_relative_folders_reach_units_and_evaluation_as_the_driver_means_them(tmp_path,
                                                                              monkeypatch):
    # units and evaluations run in the repository's folder: a relative folder is resolved first
    monkeypatch.chdir(tmp_path)
    units, run = runner.plan("poisson", ["--smoke", "--out", "o", "--checkpoint-dir", "c"])
    assert runner.folders(run) == ["--out", str(tmp_path / "o"), "--checkpoint-dir",
                                   str(tmp_path / "c"), "--weights-dir",
                                   str(tmp_path / "c" / "final")]
    assert units[0].argv[-9:-3] == tuple(runner.folders(run)) and units[0].ckpt_dir == str(
        tmp_path / "c")
    # the evaluation gets the folders given, resolved (its command is the one results.json keeps)
    assert runner.resolved(["--full", "--out", "o", "--data-dir=d", "--seed", "1"]) == [
        "--full", "--out", str(tmp_path / "o"), f"--data-dir={tmp_path / 'd'}", "--seed", "1"]


class _Unit:
    """A unit whose process exits with `code` each time it runs."""
    def __init__(self, code):
        self.code, self.runs = code, 0

    def run(self):
        self.runs += 1
        return self.code


def test_a_refused_unit_is_not_retried_and_a_failed_one_is():
    refused, failed, done = _Unit(2), _Unit(1), _Unit(0)
    errors = {unit: error for unit, error in runner._processes([refused, failed, done], 2)}
    assert isinstance(errors[refused], runner.UnitRefused) and refused.runs == 1
    assert isinstance(errors[failed], runner.UnitFailed) and failed.runs == runner.RETRIES + 1
    assert errors[done] is None and done.runs == 1


def test_runner_options_are_not_the_experiments():
    options, rest = runner.parse_options(["--full", "--executor", "ray", "--seeds", "0", "1",
                                          "--address", "auto", "--only", "a"])
    assert (options.executor, options.address, options.workers) == ("ray", "auto", None)
    assert rest == ["--full", "--seeds", "0", "1", "--only", "a"]
    for bad in (["--workers", "2"], ["--address", "x", "--executor", "processes"],
                ["--executor", "ray", "--address", "x", "--workers", "2"]):
        with pytest.raises(SystemExit):
            runner.parse_options(bad)


def test_all_gives_each_experiment_its_own_folders():
    assert _own_folders("cnf", ["--smoke", "--out", "/o", "--checkpoint-dir=/c", "--seed", "1",
                                "--weights-dir", "w"]) == [
        "--smoke", "--out", os.path.join("/o", "cnf"), "--checkpoint-dir=" + os.path.join(
            "/c", "cnf"), "--seed", "1", "--weights-dir", os.path.join("w", "cnf")]


def test_a_worker_that_cannot_see_the_checkpoint_folder_says_which(tmp_path):
    token = runner._leave_token(str(tmp_path))
    runner.check_shared(str(tmp_path), token)
    with pytest.raises(runner.SharedFolderError, match=f"cannot see the driver's checkpoint "
                                                       f"folder {tmp_path / 'elsewhere'} "):
        runner.check_shared(str(tmp_path / "elsewhere"), token)


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["processes", "ray"])
@pytest.mark.parametrize("name", ["spirals", "poisson"])
def test_executors_give_the_numbers_of_a_local_run(tmp_path, local_numbers, name, executor):
    if executor == "ray":
        pytest.importorskip("ray", reason=NEEDS_RAY)
    assert reproduce(tmp_path, name, "--executor", executor, "--workers", "2") == \
        local_numbers(name)
    assert not [f for f in os.listdir(tmp_path / "ckpt") if f.startswith(".driver")]


@pytest.mark.slow
def test_a_killed_unit_is_retried_from_its_checkpoint(tmp_path, local_numbers):
    """Each spirals unit's process is killed (SIGKILL) after its first checkpoint (step 2 of 5;
    a unit with random restarts: its first start's, at step 2): the processes executor runs it
    again, from step 2 (each unit's checkpoint loaded once, at step 2), and the numbers are
    those of one run."""
    env = with_kill_hook(tmp_path, "self")
    assert reproduce(tmp_path, "spirals", "--executor", "processes", "--workers", "2",
                     env=env) == local_numbers("spirals")
    loads = events(tmp_path)
    # the Latent ODE's unit also reads its finished first stage's final weights (step 5) to
    # train on from them: those are no resumption
    first = [e for e in loads if e["unit"].startswith("latent_ode_extended")
             and e["file"] == e["unit"].replace("extended", "gru") + ".ckpt"]
    assert first and {e["step"] for e in first} == {5}
    resumed = [e for e in loads if e not in first]
    units, _ = runner.plan("spirals", ["--smoke"])
    assert sorted(e["unit"] for e in resumed) == sorted(u.name for u in units)
    # (the Latent ODE's unit: its first stage's first start, in the same process)
    for unit, model in (("latent_ode_2l", "latent_ode_2l"),
                        ("latent_ode_extended", "latent_ode_gru")):
        assert {e["file"] for e in resumed if e["unit"].startswith(unit)} == {
            f"{model}_n{n}_seed0_start0.ckpt" for n in (30, 50, 100)}
    assert {e["step"] for e in resumed} == {2}
    assert {tuple(e["threads"]) for e in resumed} == {("1", "1", "1")}


@pytest.mark.slow
def test_a_killed_ray_worker_is_replaced_and_its_unit_resumed(tmp_path, local_numbers):
    """The Ray worker running the Poisson unit is killed after the unit's first checkpoint: the
    unit's process dies with it, Ray retries the task, and it resumes from step 2."""
    pytest.importorskip("ray", reason=NEEDS_RAY)
    env = with_kill_hook(tmp_path, "parent")
    assert reproduce(tmp_path, "poisson", "--executor", "ray", "--workers", "2",
                     env=env) == local_numbers("poisson")
    assert events(tmp_path) == [{"unit": "latent_ode", "file": "latent_ode.ckpt", "step": 2,
                                 "threads": ["1", "1", "1"]}]


@pytest.mark.slow
def test_the_executor_benchmark_runs_in_smoke_mode(tmp_path):
    pytest.importorskip("ray", reason=NEEDS_RAY)
    out = tmp_path / "executors.json"
    done = subprocess.run([sys.executable, os.path.join("benchmarks", "executors.py"), "--smoke",
                           "--experiment", "poisson", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert set(record["wall_s"]) == {"local", "processes", "ray"}
    assert all(t > 0 for t in record["wall_s"].values())
    assert record["speedup_over_local"]["local"] == 1.0
    assert "--executor ray" in record["commands"]["ray"] and record["machine"]["cpus"]


def test_the_cluster_guide_counts_the_units_of_the_full_protocols():
    import importlib

    from reproduce.__main__ import EXPERIMENTS
    counts = {}
    for name, (package, *_) in EXPERIMENTS.items():
        experiment = importlib.import_module(package + ".experiment")
        counts[name] = len(experiment.units(experiment.make_run(["--full"])))
    guide = open(os.path.join(os.path.dirname(__file__), "..", "docs", "cluster.md")).read()
    head = " ".join(guide.split("\n\n")[1].split())
    assert f"are {sum(counts.values())} independent units" in head
    assert f"{counts['mnist']} MNIST models" in head and f"{counts['spirals']} spiral units" in head
    assert f"{counts['cnf']} CNF and planar-flow models" in head and counts["poisson"] == 1
    table = dict(re.findall(r"^\| (\w+) \| (\d+)\b", guide, re.M))
    assert table == {name: str(count) for name, count in counts.items()}
