"""Peak memory of one gradient through odeint as the number of solver steps grows: the adjoint
(method='adams') stays flat, direct backprop through RK4 (the paper's RK-Net) grows linearly.

The state is a batch of 128 x 64 numbers with MLP dynamics (64-64-64, tanh); the number of steps
grows with the integration time T (adjoint) or 1/step_size (rk4). Peak memory is numpy's
allocations as seen by tracemalloc during one loss + gradient.

    python benchmarks/memory_scaling.py [--out figures/benchmarks/memory_scaling.json]
"""
import argparse
import os
import sys
import tracemalloc

import autograd.numpy as anp
import numpy as np
from autograd import grad

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from odeint_autograd import SolverStats, odeint  # noqa: E402
from reproduce.common import machine, now, write_json  # noqa: E402


def dynamics(y, t, W1, W2):
    return anp.dot(anp.tanh(anp.dot(y, W1)), W2)


def peak_memory(method, T, batch=128, width=64, **options):
    """(peak MB during loss + gradient, forward steps, forward NFE)."""
    rs = np.random.RandomState(0)
    params = [rs.randn(width, width) / np.sqrt(width), rs.randn(width, width) / np.sqrt(width)]
    y0 = rs.randn(batch, width)
    stats = SolverStats()

    def loss(params):
        return anp.sum(odeint(dynamics, y0, np.array([0.0, T]), tuple(params), method=method,
                              stats=stats, **options)[-1] ** 2)

    tracemalloc.start()
    grad(loss)(params)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2 ** 20, stats.forward.steps, stats.forward.nfe


def measure(batch=128, width=64):
    rows = []
    for T in (1.0, 2.0, 4.0, 8.0):
        mb, steps, nfe = peak_memory("adams", T, batch, width, rtol=1e-5, atol=1e-5)
        rows.append({"method": "adams (adjoint)", "T": T, "steps": steps, "nfe": nfe,
                     "peak_mb": mb})
    for T in (1.0, 2.0, 4.0, 8.0):
        mb, steps, nfe = peak_memory("rk4", T, batch, width, step_size=0.1)
        rows.append({"method": "rk4 (direct backprop)", "T": T, "steps": steps, "nfe": nfe,
                     "peak_mb": mb})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join("figures", "benchmarks",
                                                      "memory_scaling.json"))
    args = parser.parse_args(argv)
    rows = measure()
    print(f"{'method':24s} {'T':>4s} {'steps':>6s} {'NFE':>6s} {'peak MB':>8s}")
    for r in rows:
        print(f"{r['method']:24s} {r['T']:4.0f} {r['steps']:6d} {r['nfe']:6d} "
              f"{r['peak_mb']:8.1f}")
    write_json(args.out, {"command": "python benchmarks/memory_scaling.py " + " ".join(argv or []),
                          "date": now(), "machine": machine(), "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
