"""Figure 3(c): what sets the ODE-Net's backward NFE against its forward NFE in this stack.

One loss gradient (cross-entropy of a test batch, the adjoint through scipy's solvers) of an
ODE-Net, per setting of the solves: the forward solver, the adjoint's solver, its tolerance and
its error norm (full, or the seminorm that leaves the parameter-gradient integrals out of the
error control). NFE: forward = dynamics evaluations of the forward solve, backward = evaluations
of the augmented dynamics (one f and one vector-Jacobian product each), as in training.

    python benchmarks/nfe_ratio.py [--weights weights/mnist/odenet.ckpt] [--batches 4]
    python benchmarks/nfe_ratio.py --untrained      # the same network at its initialisation

Writes figures/benchmarks/nfe_ratio.json (or --out).
"""
import argparse
import datetime
import os
import sys
import time

import numpy as np
from autograd import grad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from odeint_autograd import SolverStats, odeint  # noqa: E402
from reproduce.common import Checkpoint, machine, write_json  # noqa: E402
from reproduce.mnist import data as D  # noqa: E402
from reproduce.mnist.models import ODE_TOL, T_SPAN, cross_entropy, make_model, tf_blocks  # noqa

# (forward method, adjoint method, adjoint tolerance, seminorm): the training setting first.
SETTINGS = [
    ("adams", "adams", ODE_TOL, False),
    ("adams", "adams", ODE_TOL, True),
    ("adams", "adams", 3e-3, False),
    ("adams", "adams", 1e-2, False),
    ("adams", "adams", 1e-2, True),
    ("adams", "adams", 1e-4, False),
    ("adams", "dopri5", ODE_TOL, False),
    ("adams", "dopri5", ODE_TOL, True),
    ("adams", "bosh3", ODE_TOL, True),
    ("lsoda", "lsoda", ODE_TOL, False),
    ("lsoda", "lsoda", ODE_TOL, True),
]


def measure(params, x, y, blocks, method, adjoint_method, adjoint_tol, seminorm):
    """(forward NFE, backward NFE, seconds) of one loss gradient."""
    h = np.asarray(blocks["down"](x, *params["down"]))
    stats = SolverStats()

    def loss(dyn):
        z = odeint(blocks["dynamics"], h, np.array(T_SPAN), args=tuple(dyn), method=method,
                   rtol=ODE_TOL, atol=ODE_TOL, adjoint_method=adjoint_method,
                   adjoint_rtol=adjoint_tol, adjoint_atol=adjoint_tol,
                   adjoint_seminorm=seminorm, stats=stats)[-1]
        return cross_entropy(blocks["head"](z, *params["head"]), y)

    started = time.perf_counter()
    grad(loss)(list(params["dynamics"]))
    return stats.forward.nfe, stats.backward.nfe, time.perf_counter() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", default=os.path.join(ROOT, "weights", "mnist", "odenet.ckpt"))
    parser.add_argument("--untrained", action="store_true",
                        help="the ODE-Net at its initialisation (seed 0) instead of --weights")
    parser.add_argument("--batches", type=int, default=4, help="test batches of 128")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", default=os.path.join(ROOT, "figures", "benchmarks",
                                                      "nfe_ratio.json"))
    args = parser.parse_args(argv)
    if args.untrained:
        import zlib
        params = make_model("odenet").init(np.random.RandomState([0, zlib.crc32(b"odenet")]))
        source = "untrained (seed 0)"
    else:
        state = Checkpoint(args.weights).load(force=True)
        if state is None:
            parser.error(f"no weights at {args.weights} (train the ODE-Net, or --untrained)")
        params = state["params"]
        source = f"{os.path.relpath(args.weights, ROOT)} after {state['epoch']} epochs"
    images, labels = D.load(args.data_dir)["test"]
    blocks = tf_blocks("float32")
    rows = []
    for method, adjoint_method, adjoint_tol, seminorm in SETTINGS:
        nfe_f, nfe_b, seconds = [], [], []
        for b in range(args.batches):
            x = D.to_float(images[b * 128:(b + 1) * 128])
            f, bw, s = measure(params, x, labels[b * 128:(b + 1) * 128], blocks, method,
                               adjoint_method, adjoint_tol, seminorm)
            nfe_f.append(f)
            nfe_b.append(bw)
            seconds.append(s)
        row = {"method": method, "adjoint_method": adjoint_method, "adjoint_tol": adjoint_tol,
               "seminorm": seminorm, "nfe_forward": float(np.mean(nfe_f)),
               "nfe_backward": float(np.mean(nfe_b)),
               "backward_over_forward": float(np.mean(nfe_b) / np.mean(nfe_f)),
               "seconds_per_gradient": float(np.median(seconds))}
        rows.append(row)
        print(f"{method:6s} adjoint {adjoint_method:6s} tol {adjoint_tol:g} "
              f"{'seminorm' if seminorm else 'full norm'}: NFE {row['nfe_forward']:.1f} / "
              f"{row['nfe_backward']:.1f} = {row['backward_over_forward']:.2f}", flush=True)
    record = {"command": "python benchmarks/nfe_ratio.py " + " ".join(argv or sys.argv[1:]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "model": source, "batches": args.batches, "forward_tol": ODE_TOL,
              "machine": machine(), "rows": rows}
    write_json(args.out, record, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
