"""python -m reproduce list | units NAME [options] | NAME [options] | all [options] | report

EXPERIMENTS is the registry: each entry is a package reproduce/NAME/ with the same shape
(experiment.py: SETTINGS, CHOICES, units(run), main(argv); figures.py; report.py: its section of
the report). `all` runs them in this order and the report composes their sections in it.

--executor processes|ray runs the experiments' units of work side by side (reproduce/runner.py)
and evaluates each experiment from what its units wrote as soon as they are done; with `all`,
the folder flags (--out, --checkpoint-dir, --weights-dir) name parent folders, each experiment
writing into NAME/ there."""
import importlib
import os
import sys
import time
import traceback

# name -> (package, what of the paper it regenerates)
EXPERIMENTS = {
    "mnist": ("reproduce.mnist", "Table 1 and Figure 3: ODE-Net, RK-Net, ResNet and MLP on MNIST"),
    "cnf": ("reproduce.cnf", "Figures 4 and 6: continuous normalizing flows vs planar flows"),
    "spirals": ("reproduce.spirals", "Table 2, Figures 9 and 10: latent ODE on irregular spirals"),
    "poisson": ("reproduce.poisson", "Figure 8: latent ODE Poisson process likelihood"),
}

USAGE = """usage: python -m reproduce list
       python -m reproduce units NAME [--smoke | --quick | --full] [...]
       python -m reproduce NAME [--smoke | --quick | --full] [--seed S] [--resume] [...]
       python -m reproduce all [--smoke | --quick | --full] [--seed S] [...]
       python -m reproduce report
options of NAME and all: --executor local | processes [--workers N] | ray [--workers N |
       --address ADDR] (local: one unit after another in this process, the default)"""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "list":
        if rest:
            print(f"python -m reproduce list: takes no arguments, not {' '.join(rest)}",
                  file=sys.stderr)
            return 2
        for name, (_, what) in EXPERIMENTS.items():
            print(f"{name:10s} {what}")
        return 0
    if command == "units":
        if not rest or rest[0] not in EXPERIMENTS:
            print(f"python -m reproduce units: name one of {', '.join(EXPERIMENTS)}",
                  file=sys.stderr)
            return 2
        return _units(rest[0], rest[1:])
    if command == "report":
        from reproduce import report
        return report.main(rest)
    if command == "all" or command in EXPERIMENTS:
        from reproduce.runner import parse_options
        options, rest = parse_options(rest)
        if command == "all":
            argvs = {name: _own_folders(name, rest) for name in EXPERIMENTS}
        else:
            argvs = {command: rest}
        if options.executor != "local":
            return _fan_out(argvs, options, report=command == "all")
        if command != "all":
            return _run(command, rest)
        failed = [name for name, argv in argvs.items() if _timed(name, argv)]
        if failed:
            print(f"failed: {', '.join(failed)}", file=sys.stderr)
            return 1
        return 0
    print(f"unknown experiment {command!r}\n{USAGE}", file=sys.stderr)
    return 2


def _units(name, argv):
    """Print the independent units of work of one experiment, one a line (for --only)."""
    experiment = importlib.import_module(EXPERIMENTS[name][0] + ".experiment")
    run = experiment.make_run(argv)
    print("\n".join(experiment.units(run)))  # narrowed (and checked) by the selection flags
    return 0


def _own_folders(name, argv):
    """argv with the value of each folder flag (runner.FOLDER_FLAGS) extended by /NAME."""
    from reproduce.runner import FOLDER_FLAGS, with_flag_values
    return with_flag_values(argv, FOLDER_FLAGS, lambda folder: os.path.join(folder, name))


def _timed(name, argv):
    """Run one experiment between two banner lines; nonzero if it failed (or raised)."""
    start = time.time()
    print(f"==> python -m reproduce {name} {' '.join(argv)}", flush=True)
    try:
        code = _run(name, argv)
    except SystemExit as e:  # a usage error of this experiment's: run the others, then fail
        code = e.code
    except Exception:  # noqa: BLE001 -- run the others, then fail
        traceback.print_exc()
        code = 1
    print(f"<== {name}: {time.time() - start:.0f} s", flush=True)
    return code


def _fan_out(argvs, options, report):
    """Run every unit of the experiments with the executor; evaluate each experiment (the
    --resume run without --only) as soon as its units have all finished, beside the units of
    the others; then, for `all` in the default folders (quick or full), write the report."""
    from reproduce import runner
    from reproduce.common import REFUSED
    plans = {name: runner.plan(name, argv) for name, argv in argvs.items()}
    left = {name: len(units) for name, (units, _) in plans.items()}
    failed, evaluations = [], {}  # name -> (its evaluation's process, when it started)
    codes = set()  # the exit codes that failed: REFUSED where a command was refused

    def finish(name):
        if name not in failed and not plans[name][1].partial:
            evaluations[name] = runner.evaluate(name, argvs[name]), time.time()

    for name in [n for n, count in left.items() if count == 0]:
        finish(name)
    for unit, error in runner.completed([u for units, _ in plans.values() for u in units],
                                        options):
        name = unit.experiment
        if error is not None:
            print(f"python -m reproduce {name}: error: {error}", file=sys.stderr, flush=True)
            codes.add(REFUSED if isinstance(error, runner.UnitRefused) else 1)
            if name not in failed:
                failed.append(name)
        left[name] -= 1
        if left[name] == 0:
            finish(name)
    for name, (process, started) in evaluations.items():
        code = process.wait()
        print(f"<== {name}: evaluated in {time.time() - started:.0f} s"
              + (f", exit code {code}" if code else ""), flush=True)
        if code:
            failed.append(name)
            codes.add(REFUSED if code == REFUSED else 1)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return REFUSED if codes == {REFUSED} else 1
    if report and all(run.mode != "smoke" and run.args.out is None for _, run in plans.values()):
        from reproduce import report as report_module
        return report_module.main([]) or 0
    return 0


def _run(name, argv):
    """Run one experiment; its exit code: 2 (REFUSED) for a command that cannot run as given (a
    bad flag value, a checkpoint it cannot resume), 1 for a solve that failed."""
    from odeint_autograd import ODESolverError
    from reproduce.common import REFUSED, CheckpointError, UsageError
    module = importlib.import_module(EXPERIMENTS[name][0])
    try:
        return module.main(argv) or 0
    except (UsageError, CheckpointError) as e:
        print(f"python -m reproduce {name}: error: {e}", file=sys.stderr)
        return REFUSED
    except ODESolverError as e:
        print(f"python -m reproduce {name}: the ODE solver failed: {e}", file=sys.stderr)
        return 1


def _interrupted(kind, error, trace):
    """sys.excepthook: a KeyboardInterrupt (Ctrl-C, or --stop-after's simulated kill) in one
    line; Python then shuts down as usual and ends by SIGINT (which the runner does not
    retry). Anything else as Python prints it."""
    if not issubclass(kind, KeyboardInterrupt):
        return sys.__excepthook__(kind, error, trace)
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    resume = ("; the checkpoints written so far are kept: continue with --resume"
              if command == "all" or command in EXPERIMENTS else "")
    print(f"python -m reproduce: interrupted{f' ({error})' if str(error) else ''}{resume}",
          file=sys.stderr)


if __name__ == "__main__":
    sys.excepthook = _interrupted
    sys.exit(main())
