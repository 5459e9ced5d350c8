"""Where the time of a TensorFlow-evaluated ODE solve goes: TensorFlow, scipy, or the glue.

The MNIST ODE block (GroupNorm-ReLU-conv-GroupNorm-ReLU-conv-GroupNorm on a 128 x 6 x 6 x 64 state)
is solved with odeint(method="adams", rtol=atol=1e-3) from t = 0 to 1, forward and backward (the
gradient of a scalar loss with respect to the initial state and the parameters), and each
phase's wall time is split into

    tf     inside TensorFlow's compiled functions (`CallStats.tf_seconds` of the primitive)
    scipy  scipy's own work: the time cProfile finds inside scipy.integrate's own code (its
           Fortran solvers included), not in the Python callbacks it makes
    glue   everything else: odeint's and autograd's Python, the augmented state, and
           gpu_dynamics' own share (`CallStats.call_seconds - tf_seconds`: copies, checks);
           each phase runs under cProfile, whose own cost per Python call lands here

Also measured: one fused value+VJP call on its own, back to back (right after each backward
solve, as the machine's load drifts), and again after 20 ms of other work each time
(TensorFlow's threads idle in between, as in the solve); and scipy's time per step on states of
the same sizes with dynamics that cost nothing. Results: a table, and JSON (--out) with the
command, date, machine and load average.

    python benchmarks/tf_overhead.py [--repeats 5] [--xla] [--blas-threads 1]
                                     [--scipy-blas-unlimited]
"""
import argparse
import contextlib
import cProfile
import datetime
import os
import pstats
import shlex
import sys
import time
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if "--blas-threads" in sys.argv[:-1]:  # OpenBLAS reads it once, when numpy/scipy load it
    os.environ["OPENBLAS_NUM_THREADS"] = sys.argv[sys.argv.index("--blas-threads") + 1]

import autograd  # noqa: E402
import autograd.numpy as anp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.integrate  # noqa: E402
from gpu_dynamics import layers, tf_primitive  # noqa: E402 -- before TensorFlow (its kernels)
import tensorflow as tf  # noqa: E402
from odeint_autograd import SolverStats, _scipy, odeint  # noqa: E402
from reproduce.common import machine, write_benchmark  # noqa: E402


SCIPY_INTEGRATE = os.path.dirname(scipy.integrate.__file__) + os.sep


def scipy_seconds(profile):
    """Seconds a cProfile spent in scipy.integrate's own code (its callbacks excluded)."""
    return sum(row[2] for (path, _, _), row in pstats.Stats(profile).stats.items()
               if path.startswith(SCIPY_INTEGRATE))


def profiled(run):
    """run()'s result, its wall seconds and scipy's own seconds in it."""
    profile = cProfile.Profile()
    start = time.perf_counter()
    result = profile.runcall(run)
    return result, time.perf_counter() - start, scipy_seconds(profile)


def phase(f, stats, run):
    """Run `run()`, returning its result and the split of its wall time."""
    f.stats.reset()
    nfe_before = (stats.forward.nfe, stats.backward.nfe)
    result, wall, scipy_s = profiled(run)
    nfe = (stats.forward.nfe - nfe_before[0]) + (stats.backward.nfe - nfe_before[1])
    split = {"wall_s": wall, "tf_s": f.stats.tf_seconds, "scipy_s": scipy_s,
             "glue_s": wall - f.stats.tf_seconds - scipy_s,
             "wrapper_s": f.stats.call_seconds - f.stats.tf_seconds,  # gpu_dynamics' share
             "uploads": f.stats.uploads,
             "tf_value_calls": f.stats.value_calls, "tf_vjp_calls": f.stats.vjp_calls,
             "nfe": nfe}
    return result, split


def busy(seconds):
    """Keep this thread working for `seconds` (TensorFlow's threads meanwhile go idle)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--size", type=int, default=6)
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--xla", action="store_true", help="tf_primitive(jit_compile=True)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="OpenBLAS threads, which scipy's VODE uses for its vector updates "
                             "(default: OpenBLAS's own choice, one per core)")
    parser.add_argument("--scipy-blas-unlimited", action="store_true",
                        help="lift odeint's limit of scipy's own OpenBLAS to one thread while "
                             "it solves (to measure what the limit is for)")
    parser.add_argument("--out", default=os.path.join(ROOT, "figures", "benchmarks",
                                                      "tf_overhead.json"))
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        if args.scipy_blas_unlimited:
            stack.enter_context(mock.patch.object(_scipy, "_scipy_blas_single_threaded",
                                                  contextlib.nullcontext))
        return measure(args, argv)


def measure(args, argv):
    """The benchmark itself: prints the table, writes args.out, returns the results."""
    rng = np.random.RandomState(args.seed)
    f = tf_primitive(layers.ode_dynamics, jit_compile=args.xla)
    params = tuple(layers.init_ode_dynamics(rng, args.channels))
    y0 = rng.randn(args.batch, args.size, args.size, args.channels)
    weights = rng.randn(*y0.shape) / y0.size
    t = np.array([0.0, 1.0])
    stats = SolverStats()

    def loss(y0, params):
        ys = odeint(f, y0, t, args=params, rtol=args.tol, atol=args.tol, method="adams",
                    stats=stats)
        return anp.sum(ys[-1] * weights)

    load_before = os.getloadavg()
    runs, fused_calls = [], []
    g = -rng.randn(*y0.shape) / y0.size  # a cotangent of the adjoint's size
    for repeat in range(args.repeats + 1):  # the first traces and warms up: not reported
        stats.reset()
        (vjp, _), fwd = phase(f, stats, lambda: autograd.make_vjp(loss, (0, 1))(y0, params))
        _, bwd = phase(f, stats, lambda: vjp(1.0))
        fwd["steps"], bwd["steps"] = stats.forward.steps, stats.backward.steps
        # right after the backward solve (the machine's load drifts): the fused TensorFlow
        # value+VJP call on its own, back to back (the backward evaluation's target measure),
        # then after 20 ms of other work on this thread each time, as scipy's steps come
        # between the solve's calls
        calls = {}
        for name, pause in (("back_to_back", 0.0), ("after_work", 0.02)):
            f.stats.reset()
            for _ in range(5):
                busy(pause)
                f.value_and_vjp(g, y0, 0.5, *params)
            calls[name] = f.stats.tf_seconds / f.stats.vjp_calls
        if repeat:
            runs.append({"forward": fwd, "backward": bwd})
            fused_calls.append(calls)
    fused_call_s = float(np.median([c["back_to_back"] for c in fused_calls]))
    after_work_s = float(np.median([c["after_work"] for c in fused_calls]))

    # scipy alone: the same solver on states of the forward's and the backward's size, with
    # dynamics that cost next to nothing, for scipy's own time per step without TensorFlow
    scipy_alone = {}
    n_aug = 2 * y0.size + layers.n_params(list(params))
    for name, size in (("forward_state", y0.size), ("backward_state", n_aug)):
        alone = SolverStats()
        _, wall, scipy_s = profiled(lambda: odeint(
            lambda y, tt: -y, rng.randn(size), np.array([0.0, 20.0]), rtol=args.tol,
            atol=args.tol, method="adams", stats=alone))
        scipy_alone[name] = {"size": int(size), "steps": alone.forward.steps,
                             "scipy_ms_per_step": 1e3 * scipy_s / alone.forward.steps,
                             "wall_ms_per_step": 1e3 * wall / alone.forward.steps}

    summary = {}
    for name in ("forward", "backward"):
        total = {k: float(np.sum([r[name][k] for r in runs])) for k in runs[0][name]}
        n = len(runs)
        summary[name] = {
            "wall_s": total["wall_s"] / n, "tf_s": total["tf_s"] / n,
            "scipy_s": total["scipy_s"] / n, "glue_s": total["glue_s"] / n,
            "tf_share": total["tf_s"] / total["wall_s"],
            "scipy_share": total["scipy_s"] / total["wall_s"],
            "glue_share": total["glue_s"] / total["wall_s"],
            "wrapper_s": total["wrapper_s"] / n,
            "wrapper_share": total["wrapper_s"] / total["wall_s"],
            "nfe": total["nfe"] / n, "steps": total["steps"] / n,
            "tf_calls": (total["tf_value_calls"] + total["tf_vjp_calls"]) / n,
            "scipy_ms_per_step": 1e3 * total["scipy_s"] / total["steps"],
            # per dynamics evaluation, everything but scipy's own time
            "evaluation_ms": 1e3 * (total["wall_s"] - total["scipy_s"]) / total["nfe"],
            "tf_ms_per_call": 1e3 * total["tf_s"] / (total["tf_value_calls"]
                                                     + total["tf_vjp_calls"]),
        }
    augmented_ratio = summary["backward"]["evaluation_ms"] / (1e3 * fused_call_s)
    in_solve_ratio = summary["backward"]["evaluation_ms"] / summary["backward"]["tf_ms_per_call"]
    results = {
        "command": "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(
            __file__, ROOT)] + list(sys.argv[1:] if argv is None else argv)),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(),
        "device": f.device,
        "settings": {"batch": args.batch, "channels": args.channels, "size": args.size,
                     "state_size": int(y0.size), "params": layers.n_params(list(params)),
                     "method": "adams", "rtol": args.tol, "atol": args.tol, "t": [0.0, 1.0],
                     "dtype": f.dtype.name, "jit_compile": args.xla, "repeats": args.repeats,
                     "seed": args.seed,
                     "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS") or "default",
                     "scipy_blas_limited_to_one_thread": not args.scipy_blas_unlimited,
                     "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads()},
        "forward": summary["forward"], "backward": summary["backward"],
        "fused_value_vjp_call_ms": 1e3 * fused_call_s,
        "fused_call_after_work_ms": 1e3 * after_work_s,
        "backward_evaluation_over_fused_call": augmented_ratio,
        "backward_evaluation_over_its_tf_call": in_solve_ratio,
        "targets": {"glue_share_max": 0.10, "backward_evaluation_over_fused_call_max": 1.1},
        "scipy_alone": scipy_alone,
        "load_average": [load_before, os.getloadavg()],
        "runs": runs,
    }
    return write_benchmark(args.out, results, print_table)


def print_table(r):
    s = r["settings"]
    print(f"MNIST ODE block: batch {s['batch']}, {s['size']}x{s['size']}x{s['channels']} "
          f"(state {s['state_size']:,}), adams rtol=atol={s['rtol']:g}, {s['dtype']} on "
          f"{r['device']}, XLA {s['jit_compile']}, BLAS threads {s['blas_threads']}; mean of "
          f"{s['repeats']} runs")
    print(f"{'phase':9s} {'wall s':>6s} {'TF':>12s} {'scipy':>12s} {'glue':>12s} "
          f"{'(gpu_dyn.)':>12s} {'NFE':>4s} {'steps':>5s} {'eval ms':>7s} {'TF ms':>6s} "
          f"{'scipy ms/step':>13s}")
    for name in ("forward", "backward"):
        p = r[name]
        cell = lambda k: f"{p[k + '_s']:5.2f} {100 * p[k + '_share']:4.1f}%"  # noqa: E731
        print(f"{name:9s} {p['wall_s']:6.2f} {cell('tf'):>12s} {cell('scipy'):>12s} "
              f"{cell('glue'):>12s} {cell('wrapper'):>12s} {p['nfe']:4.0f} {p['steps']:5.0f} "
              f"{p['evaluation_ms']:7.2f} {p['tf_ms_per_call']:6.2f} "
              f"{p['scipy_ms_per_step']:13.2f}")
    print(f"one fused TF value+VJP call on its own: {r['fused_value_vjp_call_ms']:.2f} ms; one "
          f"backward augmented evaluation / that call = "
          f"{r['backward_evaluation_over_fused_call']:.3f} (target <= 1.1; / its own TF call in "
          f"the solve {r['backward_evaluation_over_its_tf_call']:.3f}); glue target <= 10%")
    print(f"the fused call after 20 ms of other work each time (as inside the solve): "
          f"{r['fused_call_after_work_ms']:.2f} ms")
    for name, a in r["scipy_alone"].items():
        print(f"scipy alone, {name} ({a['size']:,} numbers, dy/dt = -y): "
              f"{a['scipy_ms_per_step']:.2f} ms per step of its own over {a['steps']} steps")
    print(f"load average before/after: {r['load_average'][0][0]:.2f} / "
          f"{r['load_average'][1][0]:.2f} on {r['machine']['cpus']} CPUs")


if __name__ == "__main__":
    main()
