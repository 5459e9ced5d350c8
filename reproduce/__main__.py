"""python -m reproduce list | NAME [options] | all [--smoke|--quick|--full] | report"""
import importlib
import sys
import time
import traceback

# name -> (module, what of the paper it regenerates)
EXPERIMENTS = {
    "mnist": ("reproduce.mnist", "Table 1 and Figure 3: ODE-Net, RK-Net, ResNet and MLP on MNIST"),
    "cnf": ("reproduce.cnf", "Figures 4 and 6: continuous normalizing flows vs planar flows"),
    "spirals": ("reproduce.spirals", "Table 2, Figures 9 and 10: latent ODE on irregular spirals"),
    "poisson": ("reproduce.poisson", "Figure 8: latent ODE Poisson process likelihood"),
}

USAGE = """usage: python -m reproduce list
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
