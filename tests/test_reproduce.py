"""The command-line entry point: every experiment still runs (smoke settings), and the report
puts measured numbers beside the published ones."""
import ast
import glob
import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import needs_mnist

from reproduce.__main__ import EXPERIMENTS
from reproduce.common import Checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args, **kw):
    return subprocess.run([sys.executable, "-m", "reproduce", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=900, **kw)


def test_list_names_every_experiment():
    out = run("list")
    assert out.returncode == 0
    for name in EXPERIMENTS:
        assert name in out.stdout


def test_unknown_experiment_is_an_error():
    out = run("no-such-experiment")
    assert out.returncode == 2 and "unknown experiment" in out.stderr


@pytest.mark.slow
@needs_mnist
def test_all_smoke_runs_every_experiment_and_the_report(tmp_path):
    out = run("all", "--smoke")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for name in EXPERIMENTS:
        with open(os.path.join(ROOT, "figures", name, "smoke", "results.json")) as f:
            record = json.load(f)
        assert record["mode"] == "smoke" and record["experiment"] == name
        assert record["command"].startswith(f"python -m reproduce {name}")
        assert record["results"]
    report = tmp_path / "RESULTS.md"
    out = run("report", "--out", str(report), "--no-readme", "--mode", "smoke")
    assert out.returncode == 0, out.stderr
    text = report.read_text()
    assert "published" in text.lower()
    assert "0.3937" in text  # Table 2's published RNN number, beside the measured ones
    for name in EXPERIMENTS:
        assert f"python -m reproduce {name} --smoke" in text


def test_published_numbers_are_read_by_the_report_sections_only():
    """The code that measures never sees a published number: only the experiments' report
    modules (reproduce/NAME/report.py) import reproduce.published."""
    readers = []
    for path in glob.glob(os.path.join(ROOT, "**", "*.py"), recursive=True):
        if ".venv" in path or path.endswith("published.py"):
            continue
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names]
            if any("published" in n for n in names):
                readers.append(os.path.relpath(path, ROOT))
    assert sorted(readers) == [os.path.join("reproduce", name, "report.py")
                               for name in sorted(EXPERIMENTS)]


def test_the_report_composes_and_knows_no_results_key():
    """reproduce/report.py names no key of any experiment's results: each experiment's report
    module renders its own section."""
    keys = set()
    for path in glob.glob(os.path.join(ROOT, "figures", "*", "**", "results.json"),
                          recursive=True):
        with open(path) as f:
            keys |= set(json.load(f)["results"])
    assert keys
    with open(os.path.join(ROOT, "reproduce", "report.py")) as f:
        tree = ast.parse(f.read())
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
               and isinstance(n.value, str)}
    assert not strings & keys


def test_every_experiment_has_the_same_shape():
    import importlib
    for name, (package, _) in EXPERIMENTS.items():
        experiment = importlib.import_module(f"{package}.experiment")
        report = importlib.import_module(f"{package}.report")
        importlib.import_module(f"{package}.figures")
        assert set(experiment.SETTINGS) == {"smoke", "quick", "full"}, name
        assert experiment.CHOICES and callable(experiment.main), name
        for function in ("section", "summary", "durations"):
            assert callable(getattr(report, function)), (name, function)
        units = experiment.units(experiment.make_run(["--smoke"]))
        assert units and len(set(units)) == len(units), name


def test_units_are_listed_and_only_accepts_them_alone():
    out = run("units", "poisson", "--smoke")
    assert out.returncode == 0 and out.stdout.split() == ["latent_ode"]
    out = run("units", "spirals", "--smoke", "--only", "rnn_dt_n50_seed0", "rnn_n30_seed0")
    assert out.returncode == 0 and out.stdout.split() == ["rnn_n30_seed0", "rnn_dt_n50_seed0"]
    out = run("units", "mnist", "--only", "vgg")  # was ignored: every unit listed
    assert out.returncode == 2 and "unknown unit(s) vgg" in out.stderr and not out.stdout
    out = run("list", "extra")
    assert out.returncode == 2 and "takes no arguments" in out.stderr and not out.stdout
    out = run("units", "spirals", "--full", "--seeds", "4")
    assert out.stdout.split()[:2] == ["rnn_n30_seed4", "rnn_dt_n30_seed4"]
    out = run("poisson", "--smoke", "--only", "rnn")
    assert out.returncode == 2 and "unknown unit(s) rnn" in out.stderr


@pytest.mark.parametrize("args", [["--seed", "-1"], ["--seed", "2147483648"], ["--seed", "1.5"],
                                  ["--seeds", "0", "-2"]])
def test_a_seed_the_generators_refuse_is_a_usage_error(args):
    # numpy's generators take 0 <= seed < 2**32: a bad seed is refused when the command is read,
    # not met as a traceback once the run has started
    names = ["spirals"] if args[0] == "--seeds" else list(EXPERIMENTS)
    for name in names:
        out = run(name, "--smoke", "--stop-after", "1", "--out", "unused", *args)
        assert out.returncode == 2 and "Traceback" not in out.stderr, (name, out.stderr[-2000:])
        assert f"argument {args[0]}" in out.stderr and "usage" not in out.stdout, name
    from reproduce.common import SEED_MAX
    from reproduce.spirals.experiment import make_run
    assert make_run(["--smoke", "--seed", str(SEED_MAX)]).seed == SEED_MAX  # the largest taken


@pytest.mark.parametrize("flag", ["--out", "--checkpoint-dir", "--weights-dir"])
def test_a_folder_a_run_cannot_write_is_a_usage_error_before_it_trains(tmp_path, flag):
    # found when the command is read, not after hours of training when the results are written
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for folder, why in ((blocker / "out", "is not a folder"), ("/proc/no/such", "cannot write")):
        for name in EXPERIMENTS:
            out = run(name, "--smoke", flag, str(folder))
            assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
            assert f"{flag} {folder}: " in out.stderr and why in out.stderr, out.stderr
    from reproduce.common import unwritable
    assert unwritable(tmp_path / "new" / "folders") is None and list(tmp_path.iterdir()) == [
        blocker]  # a folder that can be made is fine, and the check leaves nothing behind


def test_command_line_mistakes_are_one_line_errors(tmp_path):
    for args, message in (
            (("mnist", "--smoke", "--models", ","), "--models: unknown '', ''"),  # was "none"
            (("mnist", "--smoke", "--models", "mlp,"), "--models: unknown ''"),
            (("spirals", "--smoke", "--out", ""), "--out '': an empty folder name"),
            (("report", "--no-readme", "--out", str(tmp_path / "no" / "x.md")), "no folder"),
            (("report", "--no-readme", "--out", str(tmp_path)), "the report's file, not a"),
            (("report", "--no-readme", "--out", ""), "the report's file, not a folder"),
            (("report", "--no-readme", "--out", f"{tmp_path}/new/"), "the report's file")):
        out = run(*args)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr[-2000:])
        assert "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_flags_that_select_nothing_or_contradict_are_refused(tmp_path):
    empty = ["--checkpoint-dir", str(tmp_path / "c"), "--weights-dir", str(tmp_path / "w")]
    for args, message in (
            (("cnf", "--smoke", "--only", "fig4_U1_cnf2", "--evaluate-only"),
             "--evaluate-only trains nothing, --only trains units"),
            (("spirals", "--smoke", "--evaluate-only", "--train-only-n", "30"),
             "--evaluate-only trains nothing, --train-only-n"),
            (("cnf", "--smoke", "--train-only", "nf", "--only", "fig4_U1_cnf2"),
             "--only fig4_U1_cnf2: none of these is among the units the other flags choose"),
            (("spirals", "--smoke", "--train-only-n", "30", "--only", "rnn_n50_seed0"),
             "--only rnn_n50_seed0: none of these"),
            (("units", "spirals", "--smoke", "--pilot", "gru_encoder"), "no units to list"),
            (("spirals", "--smoke", "--pilot", "gru_encoder", "--executor", "processes"),
             "no units to list or to run with --executor"),
            (("poisson", "--smoke", "--tol", "5"), "a tolerance is below 1, not 5"),
            (("report", "--out", "/proc/report.md"), "--out /proc/report.md: cannot write"),
            *(((name, "--smoke", "--evaluate-only", *empty), "nothing trained to evaluate, no "
               f"checkpoint in {tmp_path / 'c'} and no final weights in {tmp_path / 'w'}")
              for name in EXPERIMENTS)):
        out = run(*args)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr[-2000:])
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
    # `all` goes on to the next experiment after one refused its command
    out = run("all", "--smoke", "--evaluate-only", *empty)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.count("nothing trained to evaluate") == len(EXPERIMENTS)
    assert out.stderr.strip().splitlines()[-1] == f"failed: {', '.join(EXPERIMENTS)}"
    out = run("units", "spirals", "--smoke", "--train-only", "rnn_dt", "--train-only-n", "50")
    assert out.returncode == 0 and out.stdout.split() == ["rnn_dt_n50_seed0"]


def test_a_failed_solve_or_a_data_folder_it_cannot_make_is_one_line(tmp_path):
    out = run("poisson", "--smoke", "--tol", "1e-300", "--out", str(tmp_path / "o"),
              "--checkpoint-dir", str(tmp_path / "c"))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].startswith(
        "python -m reproduce poisson: the ODE solver failed: ")
    out = run("mnist", "--smoke", "--download", "--data-dir", "/proc/mnist")
    assert out.returncode == 2 and out.stderr.strip() == (
        "python -m reproduce mnist: error: cannot make the MNIST folder /proc/mnist: "
        "No such file or directory")


def test_a_results_file_the_report_cannot_read_is_named(tmp_path, monkeypatch, capsys):
    from reproduce import markdown, report
    monkeypatch.setattr(markdown, "FIGURES", str(tmp_path))
    path = tmp_path / "cnf" / "results.json"
    path.parent.mkdir()
    for content, message in (('{"mode": "full", "res', f"{path}: unreadable (Unterminated"),
                             ("{}", f"{path}: not a results file"),
                             ("[1]", f"{path}: not a results file"),
                             ('{"mode": "full", "results": {}}',
                              "figures/cnf: a results file lacks what its section reads")):
        path.write_text(content)
        assert report.main(["--out", str(tmp_path / "R.md")]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"python -m reproduce report: error: {message}"), err
    assert not (tmp_path / "R.md").exists()


def test_a_report_elsewhere_or_of_one_mode_leaves_the_readme_alone(tmp_path, monkeypatch):
    from reproduce import report
    rewritten = []
    monkeypatch.setattr(report, "update_blocks", lambda path, blocks: rewritten.append(path))
    for args in (["--out", str(tmp_path / "R.md")], ["--out", str(tmp_path / "S.md"), "--mode",
                                                     "smoke"]):
        assert report.main(args) == 0 and rewritten == []
    monkeypatch.setattr(report, "DEFAULT_OUT", str(tmp_path / "R.md"))
    assert report.main(["--out", str(tmp_path / "R.md")]) == 0
    assert rewritten == [report.README, report.BENCHMARKS_DOC]


def test_a_run_stopped_by_stop_after_ends_in_one_line_and_resumes(tmp_path):
    folders = ["--out", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ckpt")]
    out = run("poisson", "--smoke", "--stop-after", "2", *folders)
    # it dies by SIGINT, as Python does on Ctrl-C, which the runner does not retry
    assert out.returncode == -signal.SIGINT and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == (
        "python -m reproduce: interrupted (stopped after 2 steps (--stop-after)); the "
        "checkpoints written so far are kept: continue with --resume")
    assert os.listdir(tmp_path / "ckpt")  # what it wrote is there to resume from


def test_report_marks_models_a_cut_short_run_did_not_finish():
    from reproduce.cnf.report import tables
    kl = {"nf": {"2": {"kl": 0.5}}, "cnf": {"2": {"kl": 0.25}}}
    ll = {"test_log_likelihood": {"cnf": {"mean": -2.5}, "nf": {"mean": -3.125}},
          "models": {"cnf": "fig6_moons_cnf64", "nf": "fig6_moons_nf64"}}
    iterations = {"fig4_U1_nf2": {"run": 500_000, "planned": 500_000},
                  "fig4_U1_cnf2": {"run": 2_300, "planned": 10_000},
                  "fig6_moons_cnf64": {"run": 0, "planned": 10_000},
                  "fig6_moons_nf64": {"run": 500_000, "planned": 500_000}}
    fig4, fig6 = tables({"results": {"figure4": {"U1": kl}, "figure6": {"moons": ll},
                                         "iterations": iterations}})
    assert "| U1 | planar NF (K layers) | 0.500 |" in fig4
    assert "| U1 | planar CNF (M units) | 0.250 (2,300 of 10,000 it.) |" in fig4
    assert "| moons | -2.500 (untrained) | -3.125 |" in fig6


def test_a_run_that_used_earlier_training_reports_it_beside_its_own_time():
    from reproduce.markdown import duration_text
    assert duration_text({"duration_s": 36}, trained=600) == (
        "0.6 min; its models trained 10 min in all")
    assert duration_text({"duration_s": 600}, trained=36) == "10 min"  # it trained them itself


def _scored_against_weights(name, results):
    """{unit: [(what the committed full results say of it, what its committed final weights
    say)]}: how far it trained and what its training took, which the results copy from the
    weights they scored (so results made from other weights, trained as far, differ)."""
    def weights(unit):
        state = Checkpoint(os.path.join(ROOT, "weights", name, f"{unit}.ckpt")).load(force=True)
        assert state is not None, f"weights/{name}/{unit}.ckpt is not committed"
        assert state["config"]["mode"] == "full", unit
        return state

    pairs = {}
    if name == "mnist":
        for unit, row in results["table1"].items():
            state = weights(unit)
            pairs[unit] = [(row["epochs_run"], state["epoch"]),
                           (row["train_seconds"],
                            sum(epoch["train_seconds"] for epoch in state["history"])),
                           (row["test_error_pct"], state["history"][-1]["test_error_pct"])]
    elif name == "cnf":
        for unit, it in results["iterations"].items():
            state = weights(unit)
            pairs[unit] = [(it["run"], state["step"]), (it["planned"], state["step"]),
                           (results["seconds_per_iteration"][unit]["seconds"], state["seconds"])]
    else:
        rows = (results["training"] if name == "spirals"
                else {"latent_ode": results["training"]})  # poisson: one model
        for unit, row in rows.items():
            state = weights(unit)
            pairs[unit] = [(row["iterations"], state["step"]),
                           (row["seconds_total"], state["seconds"]),
                           (row["final_loss"], state["history"]["loss"][-1])]
    return pairs


@pytest.mark.parametrize("name", ["mnist", "cnf", "spirals", "poisson"])
def test_committed_full_results_were_scored_from_the_committed_weights(name):
    # make reproduce re-scores each committed full run from weights/<name> alone (a fresh clone
    # has no checkpoints): every model the committed results scored must have its final weights
    # there, the very ones scored (not others trained as far), and a full results file is
    # no partial run (final weights are written only by a model that finished)
    with open(os.path.join(ROOT, "figures", name, "results.json")) as f:
        record = json.load(f)
    assert record["mode"] == "full" and "--full" in record["command"]
    pairs = _scored_against_weights(name, record["results"])
    assert pairs
    for unit, checks in pairs.items():
        for in_results, in_weights in checks:
            assert in_results == pytest.approx(in_weights, rel=1e-6), unit


def _failing_solve(y0):
    from odeint_autograd import odeint
    return odeint(lambda y, t: y * 0 + float("nan"), y0, [0.0, 1.0])


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


def test_in_processes_gives_each_tasks_result_and_its_failure_as_one_process_would(
        monkeypatch):
    import math
    from odeint_autograd import ODESolverError
    from reproduce.common import BLAS_THREADS, in_processes
    tasks = {f"task{i}": (float(i),) for i in range(5)}
    serial = dict(in_processes(math.sqrt, tasks, 1))
    assert serial == {key: math.sqrt(x) for key, (x,) in tasks.items()}
    assert dict(in_processes(math.sqrt, tasks, 3)) == serial
    for v in BLAS_THREADS:  # not one already, so that the workers' one is in_processes' doing
        monkeypatch.setenv(v, "4")
    before = {v: os.environ.get(v) for v in BLAS_THREADS}
    threads = dict(in_processes(os.getenv, {v: (v,) for v in BLAS_THREADS}, 2))
    assert threads == {v: "1" for v in BLAS_THREADS}  # each worker on one BLAS thread
    assert {v: os.environ.get(v) for v in BLAS_THREADS} == before  # the parent's unchanged
    for workers in (1, 2):  # the solver's own error, whole, from a worker as from this process
        with pytest.raises(ODESolverError) as failed:
            dict(in_processes(_failing_solve, {"x": (1.0,), "y": (2.0,)}, workers))
        assert failed.value.method is not None and failed.value.t is not None
    # a worker that dies (killed, out of memory) fails the call instead of hanging it
    from concurrent.futures.process import BrokenProcessPool
    with pytest.raises(BrokenProcessPool):
        dict(in_processes(_die, {"a": (), "b": ()}, 2))
    with pytest.raises(ValueError, match="workers must be at least 1"):
        dict(in_processes(math.sqrt, tasks, 0))
