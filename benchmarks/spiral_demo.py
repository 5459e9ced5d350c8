"""The spiral demo: one forward + gradient of a neural ODE fit, this project against autograd's
own odeint and torchdiffeq's adjoint, measured in one run.

True dynamics dy/dt = y**3 A (A = [[-0.1, 2], [-2, -0.1]]), y0 = [2, 0], t = linspace(0, 25, 1000);
learned dynamics an MLP 2-50-2 (tanh) applied to y**3; a batch of 20 segments of 10 time steps;
loss the mean absolute error. For each solver and tolerance: median wall time over the repeats
(interleaved, so that drift of this shared machine hits every row alike), NFE of the forward and
backward solves, and the gradient's relative error against a tight-tolerance reference.

    python benchmarks/spiral_demo.py [--repeats 7] [--out figures/benchmarks/spiral_demo.json]

torch and torchdiffeq are optional (pip install -e .[bench]); without them that row is skipped.
"""
import argparse
import os
import sys
import time
import timeit

import autograd.numpy as anp
import numpy as np
from autograd import grad
from autograd.builtins import tuple as ag_tuple
from autograd.extend import defvjp, primitive
from autograd.scipy.integrate import odeint as autograd_odeint

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from odeint_autograd import SolverStats, odeint  # noqa: E402
from reproduce.common import machine, now, write_json  # noqa: E402
from odeint_autograd._vjp import value_and_vjp  # noqa: E402

A = np.array([[-0.1, 2.0], [-2.0, -0.1]])
BATCH, STEPS = 20, 10
TARGETS = {"vs_autograd_max": 0.25, "vs_torchdiffeq_max": 0.5, "grad_rel_error_max": 1e-5}


def problem(seed=0):
    t = np.linspace(0.0, 25.0, 1000)
    true_y = odeint(lambda y, t: np.dot(y ** 3, A), np.array([2.0, 0.0]), t, rtol=1e-10,
                    atol=1e-10)
    rs = np.random.RandomState(seed)
    idx = rs.choice(len(t) - STEPS, BATCH, replace=False)
    batch_y0, batch_t = true_y[idx], t[:STEPS]
    batch_y = np.stack([true_y[idx + i] for i in range(STEPS)])  # (STEPS, BATCH, 2)
    params = [rs.randn(2, 50) * 0.1, np.zeros(50), rs.randn(50, 2) * 0.1, np.zeros(2)]
    return batch_y0, batch_t, batch_y, params


def mlp(y, t, W1, b1, W2, b2):
    return anp.dot(anp.tanh(anp.dot(y ** 3, W1) + b1), W2) + b2


def ours(batch_y0, batch_t, batch_y, method, tol, seminorm=False, adjoint_method=None):
    def run(params):
        stats = SolverStats()
        loss = lambda p: anp.mean(anp.abs(odeint(mlp, batch_y0, batch_t, tuple(p), rtol=tol,
                                                 atol=tol, method=method, stats=stats,
                                                 adjoint_seminorm=seminorm,
                                                 adjoint_method=adjoint_method) - batch_y))
        g = grad(loss)(params)
        return g, stats.forward.nfe, stats.backward.nfe
    return run


def autograd_baseline(batch_y0, batch_t, batch_y, tol):
    """autograd.scipy.integrate.odeint (Appendix D's code): 1-D states, LSODA both ways."""
    shape = batch_y0.shape
    calls = {"forward": 0, "backward": 0, "phase": "forward"}

    @primitive
    def backward_starts_here(ys):  # the identity; its VJP runs just before odeint's
        return ys

    defvjp(backward_starts_here, lambda ans, ys: lambda g: calls.update(phase="backward") or g)

    def flat(y, t, *p):
        calls[calls["phase"]] += 1
        return anp.reshape(mlp(anp.reshape(y, shape), t, *p), (-1,))

    def run(params):
        loss = lambda p: anp.mean(anp.abs(anp.reshape(backward_starts_here(autograd_odeint(
            flat, anp.reshape(batch_y0, (-1,)), batch_t, ag_tuple(p), rtol=tol, atol=tol)),
            (STEPS,) + shape) - batch_y))
        calls.update(forward=0, backward=0, phase="forward")
        g = grad(loss)(params)
        return g, calls["forward"], calls["backward"]
    return run


def torchdiffeq_baseline(batch_y0, batch_t, batch_y, tol):
    import torch
    from torchdiffeq import odeint_adjoint
    torch.set_num_threads(1)

    class MLP(torch.nn.Module):
        def __init__(self, params):
            super().__init__()
            self.p = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.tensor(x, dtype=torch.float64)) for x in params])
            self.nfe = 0

        def forward(self, t, y):
            self.nfe += 1
            W1, b1, W2, b2 = self.p
            return torch.tanh(y ** 3 @ W1 + b1) @ W2 + b2

    y0, tt = torch.tensor(batch_y0), torch.tensor(batch_t)
    target = torch.tensor(batch_y)

    def run(params):
        func = MLP(params)
        pred = odeint_adjoint(func, y0, tt, rtol=tol, atol=tol, method="dopri5")
        loss = torch.mean(torch.abs(pred - target))
        forward = func.nfe
        loss.backward()
        return [p.grad.numpy().copy() for p in func.p], forward, func.nfe - forward
    return run


def rel_error(g, ref):
    a = np.concatenate([np.ravel(x) for x in g])
    b = np.concatenate([np.ravel(x) for x in ref])
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=os.path.join("figures", "benchmarks",
                                                      "spiral_demo.json"))
    args = parser.parse_args(argv)
    batch_y0, batch_t, batch_y, params = problem()
    data = (batch_y0, batch_t, batch_y)

    reference, _, _ = ours(*data, "lsoda", 1e-12)(params)
    check, _, _ = ours(*data, "dopri5", 1e-12)(params)  # direct backprop, another method
    rows = {}
    for tol in (1e-7, 1e-5):
        rows[("odeint_autograd lsoda", tol)] = ours(*data, "lsoda", tol)
        rows[("odeint_autograd adams", tol)] = ours(*data, "adams", tol)
        rows[("odeint_autograd adams seminorm", tol)] = ours(*data, "adams", tol, seminorm=True)
        for adjoint_method in ("dopri5", "bosh3", "rkf23"):
            rows[(f"odeint_autograd lsoda, {adjoint_method} adjoint", tol)] = ours(
                *data, "lsoda", tol, adjoint_method=adjoint_method)
        rows[("autograd.scipy.integrate.odeint", tol)] = autograd_baseline(*data, tol)
        try:
            rows[("torchdiffeq odeint_adjoint dopri5", tol)] = torchdiffeq_baseline(*data, tol)
        except ImportError:
            print("torch/torchdiffeq not installed: skipping that row (pip install -e .[bench])")

    times = {key: [] for key in rows}
    outputs = {key: run(params) for key, run in rows.items()}  # warm-up, and the NFE/error
    for _ in range(args.repeats):
        for key, run in rows.items():
            start = time.perf_counter()
            run(params)
            times[key].append(time.perf_counter() - start)

    table = []
    for (name, tol), run in rows.items():
        g, nfe_f, nfe_b = outputs[(name, tol)]
        table.append({"solver": name, "tol": tol,
                      "median_s": float(np.median(times[(name, tol)])),
                      "min_s": float(np.min(times[(name, tol)])),
                      "nfe_forward": int(nfe_f), "nfe_backward": int(nfe_b),
                      "grad_rel_error": rel_error(g, reference)})
    for row in table:
        base = {r["solver"]: r["median_s"] for r in table if r["tol"] == row["tol"]}
        row["vs_autograd"] = row["median_s"] / base["autograd.scipy.integrate.odeint"]
        if "torchdiffeq odeint_adjoint dopri5" in base:
            row["vs_torchdiffeq"] = row["median_s"] / base["torchdiffeq odeint_adjoint dopri5"]

    # what one backward evaluation costs: autograd tracing the dynamics and running their VJP,
    # against the dynamics alone in plain numpy
    args_ = (batch_y0, 0.0) + tuple(params)
    cotangent = np.ones_like(batch_y0)
    per_call = {
        "autograd_value_and_vjp_s": lambda: value_and_vjp(mlp, args_, tuple(range(len(args_))),
                                                          cotangent),
        "numpy_forward_s": lambda: mlp(*args_),
    }
    evaluation = {k: float(np.median([timeit.timeit(fn, number=100) / 100
                                      for _ in range(args.repeats)]))
                  for k, fn in per_call.items()}

    header = (f"{'solver':38s} {'tol':>6s} {'median ms':>9s} {'NFE f':>6s} {'NFE b':>6s} "
              f"{'grad err':>9s} {'/autograd':>9s} {'/torchdiffeq':>12s}")
    print(header)
    for r in table:
        print(f"{r['solver']:38s} {r['tol']:6.0e} {1e3 * r['median_s']:9.1f} "
              f"{r['nfe_forward']:6d} {r['nfe_backward']:6d} {r['grad_rel_error']:9.1e} "
              f"{r['vs_autograd']:9.2f} {r.get('vs_torchdiffeq', float('nan')):12.2f}")
    print(f"one evaluation of the MLP dynamics: autograd trace + VJP "
          f"{1e6 * evaluation['autograd_value_and_vjp_s']:.0f} us, plain numpy forward "
          f"{1e6 * evaluation['numpy_forward_s']:.0f} us")
    print(f"reference: odeint_autograd lsoda at 1e-12; dopri5 direct backprop at 1e-12 differs "
          f"from it by {rel_error(check, reference):.1e}")
    write_json(args.out, {
        "command": "python benchmarks/spiral_demo.py " + " ".join(argv or sys.argv[1:]),
        "date": now(), "machine": machine(), "repeats": args.repeats,
        "reference_check": rel_error(check, reference), "rows": table,
        "evaluation": evaluation, "targets": TARGETS})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
