"""One SGD training step of each Table 1 model, this project against PyTorch / torchdiffeq.

A step is what `reproduce.mnist.train` does per batch: the loss and its gradient, then the
momentum-SGD update (lr 0.1, momentum 0.9), at batch 128 on the first MNIST training images (no
crop). The PyTorch models have the same architectures (torchdiffeq's ODE-Net example: the
ODE-Net through `odeint_adjoint`, dopri5, rtol = atol = 1e-3; RK-Net through `odeint`, dopri5,
backprop through the solver's operations; a 6-block pre-activation ResNet; the 784-300-10 MLP)
and start from the same initial parameters (the first step's losses are recorded to show it);
TensorFlow and PyTorch get --threads threads each. Both sides of each model run interleaved
(model A ours, A theirs, B ours, ...) so that the machine's load drifts over both; after
--warmup untimed rounds, --steps timed rounds, median per side. PyTorch is left out when the
`bench` extra (torch, torchdiffeq) is not installed.

Each step of ours also reports its TensorFlow calls and the seconds inside them, per primitive
(`CallStats`: value calls, VJP calls, seconds), and both sides their NFE (forward: dynamics
evaluations in the forward solve; backward: evaluations in the adjoint solve, or the recorded
stages differentiated for RK-Net). Results: a table, and JSON (--out) with the command, date,
machine and load average.

    python benchmarks/mnist_step.py [--models resnet odenet rknet mlp] [--warmup 3] [--steps 12]
                                    [--threads 2] [--blas-threads 1] [--xla] [--no-torch]
"""
import argparse
import datetime
import os
import shlex
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# PyTorch's OpenMP threads otherwise spin at every barrier: with any other load on the machine
# a spinning thread waits for a descheduled one, and PyTorch's steps slow down several-fold
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if "--blas-threads" in sys.argv[:-1]:  # OpenBLAS reads it once, when numpy loads it
    os.environ["OPENBLAS_NUM_THREADS"] = sys.argv[sys.argv.index("--blas-threads") + 1]

import numpy as np  # noqa: E402
from autograd import value_and_grad  # noqa: E402

from reproduce.common import SGD, machine, write_benchmark  # noqa: E402
from reproduce.mnist import data as D  # noqa: E402
from reproduce.mnist import models as M  # noqa: E402

LR, MOMENTUM = 0.1, 0.9


class Ours:
    """A model of this project and its training step."""

    def __init__(self, name, params, jit=False):
        self.model = M.make_model(name, jit=jit)
        self.params = params
        self.opt = SGD(LR, MOMENTUM)
        self.primitives = getattr(self.model, "blocks", {})

    def counters(self):
        return {k: (p.stats.value_calls, p.stats.vjp_calls, p.stats.tf_seconds)
                for k, p in self.primitives.items()}

    def step(self, x, y):
        """One step; returns its wall seconds, NFE, and TensorFlow calls and seconds (in all,
        and per primitive: value calls, VJP calls, seconds)."""
        before = self.counters()
        mark = self.model.mark()
        start = time.perf_counter()
        loss, grads = value_and_grad(lambda p: M.cross_entropy(self.model.logits(p, x), y))(
            self.params)
        self.params = self.opt.step(self.params, grads)
        wall = time.perf_counter() - start
        nfe = self.model.counts_since(mark)
        by_primitive = {k: [a - b for a, b in zip(now, before[k])]
                        for k, now in self.counters().items() if now != before[k]}
        return {"wall_s": wall, "loss": float(loss), "nfe_forward": nfe[0],
                "nfe_backward": nfe[1],
                "tf_calls": sum(v + j for v, j, _ in by_primitive.values()),
                "tf_s": sum(s for _, _, s in by_primitive.values()),
                "tf_by_primitive": by_primitive}


class Theirs:
    """The same model in PyTorch (torchdiffeq for the ODE solves), from the same parameters.

    Functional, like `gpu_dynamics.layers`: our HWIO convolution weights transposed to PyTorch's
    OIHW (the linear weights keep our (in, out) layout); NCHW images."""

    def __init__(self, name, params):
        import torch
        self.torch, self.F, self.name, self.nfe = torch, torch.nn.functional, name, 0
        self.leaves = []

        def leaf(a):
            a = np.asarray(a)
            t = torch.tensor(np.ascontiguousarray(a.transpose(3, 2, 0, 1) if a.ndim == 4
                                                  else a), dtype=torch.float32,
                             requires_grad=True)
            self.leaves.append(t)
            return t

        self.params = _tree_map(leaf, params)
        self.opt = torch.optim.SGD(self.leaves, lr=LR, momentum=MOMENTUM)

    def gn(self, x, gamma, beta):
        return self.F.group_norm(x, min(32, x.shape[1]), gamma, beta, eps=1e-5)

    def dynamics(self, t, y):
        """GN-ReLU-conv(t)-GN-ReLU-conv(t)-GN, t as channel 0 (torchdiffeq's ConcatConv2d)."""
        self.nfe += 1
        g1, b1, w1, c1, g2, b2, w2, c2, g3, b3 = self.params["dynamics"]
        h = self.F.relu(self.gn(y, g1, b1))
        h = self.F.conv2d(self.torch.cat([self.torch.ones_like(h[:, :1]) * t, h], 1), w1, c1,
                          padding=1)
        h = self.F.relu(self.gn(h, g2, b2))
        h = self.F.conv2d(self.torch.cat([self.torch.ones_like(h[:, :1]) * t, h], 1), w2, c2,
                          padding=1)
        return self.gn(h, g3, b3)

    def logits(self, x):
        F, p = self.F, self.params
        if self.name == "mlp":
            return F.relu(x.reshape(len(x), -1) @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
        w1, c1, g1, b1, w2, c2, g2, b2, w3, c3 = p["down"]
        h = F.conv2d(x, w1, c1)
        h = F.conv2d(F.relu(self.gn(h, g1, b1)), w2, c2, stride=2, padding=1)
        h = F.conv2d(F.relu(self.gn(h, g2, b2)), w3, c3, stride=2, padding=1)
        if self.name == "resnet":
            for n1, m1, k1, n2, m2, k2 in p["blocks"]:
                r = F.conv2d(F.relu(self.gn(h, n1, m1)), k1, padding=1)
                h = h + F.conv2d(F.relu(self.gn(r, n2, m2)), k2, padding=1)
        else:
            import torchdiffeq
            t = self.torch.tensor([0.0, 1.0])
            tol = dict(rtol=M.ODE_TOL, atol=M.ODE_TOL, method="dopri5")
            if self.name == "odenet":
                h = torchdiffeq.odeint_adjoint(self.dynamics, h, t, adjoint_params=tuple(
                    p["dynamics"]), **tol)[-1]
            else:
                h = torchdiffeq.odeint(self.dynamics, h, t, **tol)[-1]
        gamma, beta, w, b = p["head"]
        return F.relu(self.gn(h, gamma, beta)).mean((2, 3)) @ w + b

    def step(self, x, y):
        """One step; returns its wall seconds and NFE."""
        self.nfe = 0
        start = time.perf_counter()
        self.opt.zero_grad()
        loss = self.F.cross_entropy(self.logits(x), y)
        nfe_forward = self.nfe
        loss.backward()
        self.opt.step()
        wall = time.perf_counter() - start
        ode = self.name in ("odenet", "rknet")
        return {"wall_s": wall, "loss": loss.item(),
                "nfe_forward": nfe_forward if ode else None,
                # the adjoint's backward evaluations; RK-Net differentiates each stage once
                "nfe_backward": (self.nfe - nfe_forward if self.name == "odenet" else
                                 nfe_forward) if ode else None}


def _tree_map(f, tree):
    if isinstance(tree, dict):
        return {k: _tree_map(f, v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_tree_map(f, v) for v in tree]
    return f(tree)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=M.NAMES,
                        default=["resnet", "odenet", "rknet", "mlp"])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds (at least 1)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2,
                        help="TensorFlow's intra-op threads and PyTorch's threads")
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="OpenBLAS threads (numpy's: the MLP; default: OpenBLAS's choice)")
    parser.add_argument("--xla", action="store_true",
                        help="compile our ODE dynamics with XLA (python -m reproduce mnist "
                             "does unless --no-xla)")
    parser.add_argument("--no-torch", action="store_true", help="time this project only")
    parser.add_argument("--data-dir", default=None, help=f"MNIST (default ${D.ENV})")
    parser.add_argument("--out", default=os.path.join(ROOT, "figures", "benchmarks",
                                                      "mnist_step.json"))
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be at least 1")

    import gpu_dynamics
    gpu_dynamics.set_threads(args.threads)
    images, labels = D.load(args.data_dir)["train"]
    x = D.to_float(images[:args.batch])
    y = labels[:args.batch]
    torch = None
    if not args.no_torch:
        try:
            import torch
            import torchdiffeq
        except ImportError:
            torch = None
            print("PyTorch or torchdiffeq not installed (the 'bench' extra): this project only")
    if torch is not None:
        torch.set_num_threads(args.threads)
        x_torch = torch.tensor(x.transpose(0, 3, 1, 2), dtype=torch.float32)
        y_torch = torch.tensor(y)

    sides = {}
    for name in args.models:
        params = M.make_model(name).init(np.random.RandomState(args.seed))
        sides[name] = {"ours": Ours(name, params, jit=args.xla)}
        if torch is not None:
            sides[name]["pytorch"] = Theirs(name, params)

    load_before = os.getloadavg()
    steps = {name: {side: [] for side in s} for name, s in sides.items()}
    first_loss = {name: {} for name in sides}  # from the same parameters: the same network?
    for round_ in range(args.warmup + args.steps):
        for name, s in sides.items():
            for side, impl in s.items():
                step = (impl.step(x, y) if side == "ours" else impl.step(x_torch, y_torch))
                if round_ == 0:
                    first_loss[name][side] = step["loss"]
                if round_ >= args.warmup:
                    steps[name][side].append(step)

    rows = {}
    for name, s in steps.items():
        row = {}
        for side, timed in s.items():
            row[side] = {"step_s": float(np.median([t["wall_s"] for t in timed])),
                         "first_loss": first_loss[name][side], "steps": timed}
            for key in ("nfe_forward", "nfe_backward", "tf_calls", "tf_s"):
                values = [t[key] for t in timed if t.get(key) is not None]
                if values:
                    row[side][key + "_median"] = float(np.median(values))
        if "pytorch" in row:
            row["ratio"] = row["ours"]["step_s"] / row["pytorch"]["step_s"]
        rows[name] = row
    info = machine()
    info["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
    info["openblas_threads"] = os.environ.get("OPENBLAS_NUM_THREADS") or "default"
    if torch is not None:
        info.update(torch=torch.__version__, torchdiffeq=torchdiffeq.__version__,
                    torch_threads=torch.get_num_threads())
    results = {
        "command": "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(
            __file__, ROOT)] + list(sys.argv[1:] if argv is None else argv)),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": info,
        "settings": {"batch": args.batch, "warmup": args.warmup, "steps": args.steps,
                     "seed": args.seed, "xla": args.xla, "threads": args.threads, "lr": LR,
                     "momentum": MOMENTUM, "ode_tol": M.ODE_TOL,
                     "images": f"the first {args.batch} MNIST training images, no crop"},
        "targets": {"odenet_ratio_max": 1.2, "resnet_ratio_max": 1.5},
        "load_average": [load_before, os.getloadavg()],
        "models": rows,
    }
    return write_benchmark(args.out, results, print_table)


def print_table(r):
    s = r["settings"]
    print(f"one SGD step, batch {s['batch']}, median of {s['steps']} after {s['warmup']} "
          f"warm-up, interleaved")
    print(f"{'model':7s} {'ours s':>7s} {'TF calls':>8s} {'in TF s':>7s} {'NFE f/b':>9s} "
          f"{'PyTorch s':>9s} {'NFE f/b':>9s} {'ratio':>6s}")
    for name, row in r["models"].items():
        ours, theirs = row["ours"], row.get("pytorch", {})

        def nfe(side):
            if "nfe_forward_median" not in side:
                return "-"
            return f"{side['nfe_forward_median']:.0f}/{side['nfe_backward_median']:.0f}"

        print(f"{name:7s} {ours['step_s']:7.3f} {ours.get('tf_calls_median', 0):8.0f} "
              f"{ours.get('tf_s_median', 0):7.3f} {nfe(ours):>9s} "
              + (f"{theirs['step_s']:9.3f} {nfe(theirs):>9s} {row['ratio']:6.2f}"
                 if theirs else f"{'-':>9s} {'-':>9s} {'-':>6s}"))
    print(f"load average before/after: {r['load_average'][0][0]:.2f} / "
          f"{r['load_average'][1][0]:.2f} on {r['machine']['cpus']} CPUs")


if __name__ == "__main__":
    main()
