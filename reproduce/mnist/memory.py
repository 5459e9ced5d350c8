"""Peak memory of one training step (loss and gradient), measured, as depth or NFE grows.

tracemalloc sees numpy's allocations but not TensorFlow's (the residual blocks' and dynamics'
outputs that autograd keeps for the backward pass are TensorFlow buffers), so the measure is the
process's resident memory: the kernel's high-water mark VmHWM is reset (`echo 5 >
/proc/self/clear_refs`) just before the step, and the step's peak is VmHWM after it minus VmRSS
before it. To make that a measure of the step alone, the measuring process is fresh (a
subprocess), has run one step of the same kind before (TensorFlow's traces, XLA's compilation and
oneDNN's caches are made then, not during the step measured), allocates every block above
128 KiB with mmap (MALLOC_MMAP_THRESHOLD_), so that freed memory leaves the process and the
next step starts from the same baseline, and runs TensorFlow without oneDNN
(TF_ENABLE_ONEDNN_OPTS=0): oneDNN's allocator pools memory inside the process, which would hide
most of a step's TensorFlow memory from the kernel's counters (Eigen's kernels run instead).
tracemalloc's peak (numpy's share) is recorded beside.

    python -m reproduce.mnist.memory --plan plan.json --batch-file batch.npz --out rows.json

where plan.json is a list of configurations ({"model": "resnet", "n_blocks": 6}, {"model":
"rknet", "method": "rk4", "steps": 4}, {"model": "odenet", "t_end": 2.0}, ...). `measure` runs
that subprocess and returns its rows.
"""
import argparse
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc

import numpy as np

MMAP_THRESHOLD = 128 * 1024
STATUS = "/proc/self/status"


def _status_kib(field):
    with open(STATUS) as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def _reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def supported():
    """Whether this system lets a process reset and read its resident high-water mark."""
    try:
        _reset_peak()
        _status_kib("VmHWM")
        return True
    except (OSError, AttributeError):
        return False


def build(config, rng):
    """The model a configuration names, its parameters, and a label."""
    from .models import ResNet, make_model
    kind = config["model"]
    if kind == "resnet":
        model = ResNet(n_blocks=config.get("n_blocks", 6))
    elif kind == "rknet" and config.get("method") == "rk4":
        model = make_model("rknet", method="rk4", step_size=1.0 / config["steps"])
    elif kind in ("rknet", "odenet"):
        model = make_model(kind, t_end=config.get("t_end", 1.0),
                           **({"rtol": config["tol"], "atol": config["tol"]}
                              if "tol" in config else {}))
    else:
        model = make_model(kind)
    return model, model.init(rng)


def one_step(model, params, x, y):
    """Loss and gradient (the optimiser's update, one vector, is left out); returns NFE."""
    from autograd import value_and_grad

    from .models import cross_entropy
    mark = model.mark()
    value_and_grad(lambda p: cross_entropy(model.logits(p, x), y))(params)
    return model.counts_since(mark)


def measure_in_process(plan, x, y, seed=0):
    """Rows of peak memory for each configuration (run in a fresh process: see `measure`)."""
    rows, warmed = [], set()
    for config in plan:
        model, params = build(config, np.random.RandomState(seed))
        kind = (config["model"], config.get("method"))
        if kind not in warmed:
            one_step(model, params, x, y)  # traces and compiles: not part of any step measured
            warmed.add(kind)
        gc.collect()
        rss_before = _status_kib("VmRSS")
        _reset_peak()
        tracemalloc.start()
        started = time.perf_counter()
        nfe_f, nfe_b = one_step(model, params, x, y)
        seconds = time.perf_counter() - started
        numpy_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        peak = _status_kib("VmHWM")
        del params
        gc.collect()
        rows.append(dict(config, peak_mb=(peak - rss_before) / 1024,
                         numpy_peak_mb=numpy_peak / 2 ** 20, rss_before_mb=rss_before / 1024,
                         rss_after_mb=_status_kib("VmRSS") / 1024, nfe_forward=nfe_f,
                         nfe_backward=nfe_b, seconds=seconds))
    return rows


def measure(plan, x, y, seed=0, timeout=1800):
    """Run `measure_in_process` in a fresh Python process (see the module docstring); x, y: the
    batch every configuration is measured on."""
    from reproduce.common import ROOT
    with tempfile.TemporaryDirectory() as tmp:
        for name, value in (("plan.json", plan),):
            with open(os.path.join(tmp, name), "w") as f:
                json.dump(value, f)
        np.savez(os.path.join(tmp, "batch.npz"), x=x, y=y)
        env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0",
                   MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD),
                   MALLOC_TRIM_THRESHOLD_=str(MMAP_THRESHOLD),
                   PYTHONPATH=os.pathsep.join(filter(None, [ROOT,
                                                            os.environ.get("PYTHONPATH")])))
        out = os.path.join(tmp, "rows.json")
        proc = subprocess.run([sys.executable, "-m", "reproduce.mnist.memory", "--plan",
                               os.path.join(tmp, "plan.json"), "--batch-file",
                               os.path.join(tmp, "batch.npz"), "--out", out, "--seed",
                               str(seed)], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"the memory measurement failed:\n{proc.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def slope(rows, x_key, y_key="peak_mb"):
    """Least-squares slope of y against x (MB per layer or per function evaluation)."""
    xs = np.array([r[x_key] for r in rows], float)
    ys = np.array([r[y_key] for r in rows], float)
    if len(xs) < 2 or np.ptp(xs) == 0:
        return None
    return float(np.polyfit(xs, ys, 1)[0])


def main(argv=None):
    parser = argparse.ArgumentParser(description="peak memory of MNIST training steps")
    parser.add_argument("--plan", required=True)
    parser.add_argument("--batch-file", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not supported():
        raise SystemExit("this system cannot reset the resident-memory high-water mark "
                         "(/proc/self/clear_refs): peak memory is not measured")
    with open(args.plan) as f:
        plan = json.load(f)
    batch = np.load(args.batch_file)
    rows = measure_in_process(plan, batch["x"], batch["y"], args.seed)
    with open(args.out, "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main()
