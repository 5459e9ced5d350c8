"""Wall time of `python -m reproduce all --quick` with each executor: local (one unit after
another in one process), processes (2 workers) and ray (a local instance on every CPU).

    python benchmarks/executors.py            # writes figures/benchmarks/executors.json
    python benchmarks/executors.py --smoke    # all --smoke instead (seconds), prints the record

Each run starts from fresh temporary output and checkpoint folders, so that no run resumes
another's units; their outputs are discarded (with --keep-local-results the local run writes
its results where `python -m reproduce all --quick` would). The target (issue 18): processes and
ray at least 1.6x faster than local on a 2-core machine. Run it on a quiet machine: other work sharing the
cores makes the times and their ratios meaningless (the record keeps the load average before
each run). MNIST's units need the data ($NEURAL_ODES_DATA).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from reproduce.common import ROOT, machine, now, write_json  # noqa: E402

EXECUTORS = {"local": [], "processes": ["--workers", "2"], "ray": []}
DEFAULT_OUT = os.path.join(ROOT, "figures", "benchmarks", "executors.json")


def timed_run(command, keep_results=False):
    """Seconds of one run of `command`, in a fresh checkpoint folder and (unless keep_results:
    the experiments' default output folders) a fresh output folder, discarded afterwards."""
    with tempfile.TemporaryDirectory(prefix="executors-") as tmp:
        command = command + ([] if keep_results else ["--out", os.path.join(tmp, "out")]) + [
            "--checkpoint-dir", os.path.join(tmp, "ckpt")]
        log = os.path.join(tmp, "log.txt")
        started = time.perf_counter()
        with open(log, "w") as f:
            done = subprocess.run(command, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        seconds = time.perf_counter() - started
        if done.returncode:
            with open(log) as f:
                sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{f.read()[-5000:]}")
    return seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true",
                        help="the smoke settings instead of --quick (tests this script)")
    parser.add_argument("--experiment", default="all",
                        help="what to run: all (default) or one experiment's name")
    parser.add_argument("--keep-local-results", action="store_true",
                        help="the local run writes its results and figures where a run by hand "
                             "would (figures/NAME/quick): the timing run doubles as the quick "
                             "results")
    parser.add_argument("--out", default=None,
                        help=f"the record (default {os.path.relpath(DEFAULT_OUT, ROOT)}; with "
                             "--smoke, printed only)")
    args = parser.parse_args(argv)
    mode = "--smoke" if args.smoke else "--quick"
    commands, wall = {}, {}
    load = {}
    for executor, flags in EXECUTORS.items():
        command = ["python", "-m", "reproduce", args.experiment, mode, "--executor", executor,
                   *flags]
        commands[executor] = " ".join(command)
        load[executor] = round(os.getloadavg()[0], 2)
        print(f"{commands[executor]} ...", end=" ", flush=True)
        keep = args.keep_local_results and executor == "local"
        wall[executor] = round(timed_run([sys.executable] + command[1:], keep), 1)
        print(f"{wall[executor]} s", flush=True)
    record = {
        "benchmark": "executors",
        "command": "python benchmarks/executors.py " + " ".join(sys.argv[1:] if argv is None
                                                                  else argv),
        "date": now(),
        "machine": machine(),
        "commands": commands,
        "wall_s": wall,
        "speedup_over_local": {e: round(wall["local"] / wall[e], 2) for e in wall},
        "load_average_1min_before": load,
        "note": "each run in fresh temporary checkpoint and output folders"
                + (", but the local run in the default output folders"
                   if args.keep_local_results else ""),
    }
    out = args.out or (None if args.smoke else DEFAULT_OUT)
    if out:
        write_json(out, record)
        print(f"wrote {out}")
    else:
        print(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
