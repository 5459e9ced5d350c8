"""Which method to solve the spirals latent ODE's adjoint with at the training tolerance.

One training gradient (-ELBO of a minibatch of 100 training spirals, forward by VODE's Adams, the
adjoint with the seminorm) of a trained latent ODE, per adjoint method at the training tolerance,
against a tight solve (dopri5 at 1e-9) of the same gradient: seconds (the fastest of --repeats,
the methods measured in one run, so compare them as ratios), backward NFE and the gradient's
relative error.

    python benchmarks/spirals_adjoint.py [--weights W] [--n 30 100] [--repeats 5]

Writes figures/benchmarks/spirals_adjoint.json (or --out).
"""
import argparse
import datetime
import os
import sys
import time

import numpy as np
from autograd.misc import flatten

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from odeint_autograd import SolverStats  # noqa: E402
from reproduce.common import Checkpoint, machine, write_benchmark  # noqa: E402
from reproduce.benchmarks import spirals_adjoint_table  # noqa: E402
from reproduce.spirals.data import make_dataset, observed  # noqa: E402
from reproduce.spirals.experiment import SETTINGS, TRAINING  # noqa: E402
from reproduce.spirals.models import latent_ode_objective  # noqa: E402

TOL = SETTINGS["full"]["tol"]
METHODS = [("dopri5", 1e-9), ("dopri5", TOL), ("bosh3", TOL), ("rkf23", TOL)]  # reference first


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", default=os.path.join(
        ROOT, "weights", "spirals", "pilot_two_layer_dynamics_n30_seed0.ckpt"))
    parser.add_argument("--n", type=int, nargs="+", default=[30, 100])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(ROOT, "figures", "benchmarks",
                                                      "spirals_adjoint.json"))
    args = parser.parse_args(argv)
    state = Checkpoint(args.weights).load()
    params = (state["best"] or state)["params"]
    data = make_dataset(1000)
    rows = []
    for n in args.n:
        xs, times = observed(data, n, data["train"])
        reference = None
        for method, tol in METHODS:
            solver = dict(method="adams", rtol=tol, atol=tol, adjoint_seminorm=True,
                          adjoint_method=method)
            objective = latent_ode_objective(xs, times, solver,
                                             TRAINING["latent_ode"]["batch_size"], 0.5)
            seconds = []
            for _ in range(args.repeats):
                stats, start = SolverStats(), time.perf_counter()
                grads = flatten(objective(params, np.random.RandomState(1), stats)[1])[0]
                seconds.append(time.perf_counter() - start)
            reference = grads if reference is None else reference
            rows.append({"n": n, "adjoint_method": method, "tol": tol,
                         "seconds": min(seconds), "nfe_forward": stats.forward.nfe,
                         "nfe_backward": stats.backward.nfe,
                         "relative_error": float(np.linalg.norm(grads - reference)
                                                 / np.linalg.norm(reference))})
            print(rows[-1], flush=True)
    record = {"command": "python benchmarks/spirals_adjoint.py " + " ".join(argv or sys.argv[1:]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "weights": os.path.relpath(args.weights, ROOT), "machine": machine(), "rows": rows}
    write_benchmark(args.out, record, show)
    return 0


def show(record):
    print(spirals_adjoint_table(record))


if __name__ == "__main__":
    sys.exit(main())
