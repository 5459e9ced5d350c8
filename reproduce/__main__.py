"""python -m reproduce list | units NAME [options] | NAME [options] | all [options] | report

EXPERIMENTS is the registry: each entry is a package reproduce/NAME/ with the same shape
(experiment.py: SETTINGS, CHOICES, units(run), main(argv); figures.py; report.py: its section of
the report). `all` runs them in this order and the report composes their sections in it."""
import importlib
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
       python -m reproduce all [--smoke | --quick | --full] [--seed S]
       python -m reproduce report"""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "list":
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
    if command == "all":
        failed = []
        for name in EXPERIMENTS:
            start = time.time()
            print(f"==> python -m reproduce {name} {' '.join(rest)}", flush=True)
            try:
                if _run(name, rest):
                    failed.append(name)
            except Exception:  # noqa: BLE001 -- run the others, then fail
                traceback.print_exc()
                failed.append(name)
            print(f"<== {name}: {time.time() - start:.0f} s", flush=True)
        if failed:
            print(f"failed: {', '.join(failed)}", file=sys.stderr)
            return 1
        return 0
    if command in EXPERIMENTS:
        return _run(command, rest)
    print(f"unknown experiment {command!r}\n{USAGE}", file=sys.stderr)
    return 2


def _units(name, argv):
    """Print the independent units of work of one experiment, one a line (for --only)."""
    experiment = importlib.import_module(EXPERIMENTS[name][0] + ".experiment")
    print("\n".join(experiment.units(experiment.make_run(argv))))
    return 0


def _run(name, argv):
    from reproduce.common import CheckpointError, UsageError
    module = importlib.import_module(EXPERIMENTS[name][0])
    try:
        return module.main(argv) or 0
    except UsageError as e:
        print(f"python -m reproduce {name}: error: {e}", file=sys.stderr)
        return 2
    except CheckpointError as e:
        print(f"python -m reproduce {name}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
