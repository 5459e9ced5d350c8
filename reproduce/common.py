"""What every experiment shares: its command line, where it writes, checkpoints, optimisers with
savable state, progress bars and the results file.

An experiment module looks like:

    def main(argv=None):
        run = Run("spirals", argv, extra_args=lambda p: p.add_argument("--n-obs", ...))
        ckpt = run.checkpoint("latent_ode")          # resumes when --resume and a file exists
        state = ckpt.load() or fresh_state(run.rng)
        for it in run.progress(range(state["step"], n_iters), desc="latent ODE"):
            ...
            run.set_postfix(loss=..., nfe_f=..., nfe_b=...)
            if it % 100 == 0: ckpt.save(state)
        run.save_results({...measured...}, choices={...reproduction choices...})
"""
import argparse
import datetime
import importlib.metadata
import json
import os
import pickle
import platform
import shlex
import sys
import time
import zlib

import numpy as np
from autograd.misc import flatten

from odeint_autograd import SolverStats

MODES = ("smoke", "quick", "full")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Run:
    """One run of one experiment: mode, seed, output folder, checkpoints, timing, results."""

    def __init__(self, name, argv=None, extra_args=None, description=None):
        parser = argparse.ArgumentParser(prog=f"python -m reproduce {name}",
                                         description=description)
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--smoke", dest="mode", action="store_const", const="smoke",
                          help="seconds: tiny settings, for the tests")
        mode.add_argument("--quick", dest="mode", action="store_const", const="quick",
                          help="minutes on a 2-core CPU (default)")
        mode.add_argument("--full", dest="mode", action="store_const", const="full",
                          help="the paper's protocol")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--resume", action="store_true",
                            help="continue from this mode's checkpoints where they exist")
        parser.add_argument("--out", default=None,
                            help=f"output folder (default figures/{name} for --full, "
                                 f"figures/{name}/<mode> otherwise)")
        parser.add_argument("--checkpoint-dir", default=None,
                            help=f"default checkpoints/{name}/<mode>")
        if extra_args is not None:
            extra_args(parser)
        self.args = parser.parse_args([] if argv is None else list(argv))
        self.argv = [] if argv is None else list(argv)
        self.name = name
        self.mode = self.args.mode or "quick"
        self.seed = self.args.seed
        self.rng = np.random.RandomState(self.seed)
        # full runs write figures/<name>/ (committed, shown in the README); quick and smoke runs
        # write figures/<name>/<mode>/ so that they never overwrite a full run's results
        default_out = os.path.join(ROOT, "figures", name)
        if self.mode != "full":
            default_out = os.path.join(default_out, self.mode)
        self.out_dir = self.args.out or default_out
        self.ckpt_dir = self.args.checkpoint_dir or os.path.join(ROOT, "checkpoints", name,
                                                                 self.mode)
        os.makedirs(self.out_dir, exist_ok=True)
        self.started = time.time()
        self._bar = None

    @property
    def command(self):
        return "python -m reproduce " + " ".join(shlex.quote(a) for a in [self.name] + self.argv)

    def pick(self, smoke, quick, full):
        """The setting for this run's mode."""
        return {"smoke": smoke, "quick": quick, "full": full}[self.mode]

    def path(self, filename):
        return os.path.join(self.out_dir, filename)

    def checkpoint(self, key):
        return Checkpoint(os.path.join(self.ckpt_dir, f"{key}.pkl"), enabled=self.args.resume)

    def progress(self, iterable, desc, total=None):
        """A tqdm bar (loss and NFE go in with set_postfix); a plain iterator without tqdm."""
        try:
            from tqdm.auto import tqdm
        except ImportError:
            self._bar = None
            return iterable
        self._bar = tqdm(iterable, desc=f"{self.name}: {desc}", total=total, mininterval=1.0,
                         dynamic_ncols=True, file=sys.stderr)
        return self._bar

    def set_postfix(self, **values):
        if self._bar is not None:
            self._bar.set_postfix({k: (f"{v:.4g}" if isinstance(v, float) else v)
                                   for k, v in values.items()}, refresh=False)

    def save_results(self, results, choices=None, filename="results.json"):
        """Write results.json: the measured numbers with how, when and where they were made."""
        record = {
            "experiment": self.name,
            "mode": self.mode,
            "command": self.command,
            "seed": self.seed,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - self.started, 1),
            "machine": machine(),
            "choices": choices or {},
            "results": results,
        }
        with open(self.path(filename), "w") as f:
            json.dump(_jsonable(record), f, indent=2, sort_keys=False)
            f.write("\n")
        return record


class Checkpoint:
    """A pickled state dict written atomically; `load` returns None unless resuming."""

    def __init__(self, path, enabled=True):
        self.path, self.enabled = path, enabled

    def load(self):
        if not (self.enabled and os.path.exists(self.path)):
            return None
        with open(self.path, "rb") as f:
            return pickle.load(f)

    def save(self, state):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, self.path)


def model_rng(seed, key):
    """The random generator of one model: fixed by the run's --seed and the model's name."""
    return np.random.RandomState([seed, zlib.crc32(key.encode())])


def fit(run, key, params, objective, optimizer, n_iters, every=100, config=None, rng=None,
        stopper=None):
    """Minimise with objective(params, rng, step, stats) -> (loss, grads) for n_iters steps of
    `optimizer`, resumable to the same numbers.

    The whole state (parameters, optimiser state, the model's random generator - model_rng(seed,
    key) unless `rng` is given -, loss and NFE history, step, training seconds) is checkpointed
    every `every` steps and at the end, so that a run killed and restarted with --resume repeats
    exactly the steps an uninterrupted run would have done. `stats` is a SolverStats the
    objective may hand to odeint (reset each step). `config` (the settings that shape training)
    goes into the checkpoint, and resuming one made with other settings or another seed is
    refused. With --evaluate-only (where an experiment offers it) nothing is trained: the state
    is returned as the checkpoint stands. `stopper.tick()` runs after every step (tests use it
    to simulate a kill). Returns the state dict.
    """
    config = dict(config or {}, seed=run.seed)
    ckpt = run.checkpoint(key)
    state = ckpt.load()
    if state is None:
        state = {"params": params, "optimizer": optimizer.state_dict(),
                 "rng": (rng or model_rng(run.seed, key)).get_state(), "step": 0,
                 "seconds": 0.0, "history": {"loss": [], "nfe_f": [], "nfe_b": []},
                 "config": config}
    elif state.get("config") != config:
        raise ValueError(f"{ckpt.path} was made with {state.get('config')}, not {config}: "
                         "resume with the same settings, or use another --checkpoint-dir")
    optimizer.load_state_dict(state["optimizer"])
    rng = np.random.RandomState()
    rng.set_state(state["rng"])
    params, history, stats = state["params"], state["history"], SolverStats()
    start, started = state["step"], time.time()
    if getattr(run.args, "evaluate_only", False):
        n_iters = start
    steps = range(start, n_iters)
    for step in (run.progress(steps, desc=key, total=len(steps)) if len(steps) else steps):
        stats.reset()
        value, grads = objective(params, rng, step, stats)
        if not np.isfinite(value):
            raise FloatingPointError(f"{key}: the loss became {value} at step {step}")
        params = optimizer.step(params, grads)
        history["loss"].append(float(value))
        history["nfe_f"].append(stats.forward.nfe)
        history["nfe_b"].append(stats.backward.nfe)
        run.set_postfix(loss=float(value), nfe_f=stats.forward.nfe, nfe_b=stats.backward.nfe)
        if (step + 1) % every == 0 or step + 1 == n_iters:
            state.update(params=params, optimizer=optimizer.state_dict(), rng=rng.get_state(),
                         step=step + 1, seconds=state["seconds"] + time.time() - started)
            started = time.time()
            ckpt.save(state)
        if stopper is not None:
            stopper.tick()
    state["params"] = params
    return state


def progress_label(done, planned):
    """How far a model trained, for tables and figure panels: None when it finished its planned
    iterations, else 'untrained' or 'N of M it.'."""
    if done >= planned:
        return None
    return "untrained" if done == 0 else f"{done:,} of {planned:,} it."


def partial_note(iterations):
    """The results' note on a run cut short, or None. iterations: key -> (done, planned)."""
    short = [f"{key} {done} of {planned}" for key, (done, planned) in iterations.items()
             if done < planned]
    if short:
        return ("partial run: these models stopped before their planned iterations "
                "(iterations run of planned): " + ", ".join(short))
    return None


class StopAfter:
    """Stops a run after `limit` training steps as if it had been killed (raises
    KeyboardInterrupt): how tests check that --resume gives the numbers of an uninterrupted run.
    limit None: never."""

    def __init__(self, limit):
        self.limit, self.count = limit, 0

    def tick(self):
        self.count += 1
        if self.limit is not None and self.count >= self.limit:
            raise KeyboardInterrupt(f"stopped after {self.count} steps (--stop-after)")


class Optimizer:
    """Base of the optimisers below: a pytree of parameters in and out, and a savable state."""

    def __init__(self, lr):
        self.lr, self.state = lr, {"step": 0}

    def step(self, params, grads, lr=None):
        x, unflatten = flatten(params)
        g, _ = flatten(grads)
        self.state["step"] += 1
        return unflatten(x - self._update(g, self.lr if lr is None else lr))

    def state_dict(self):
        return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in self.state.items()}

    def load_state_dict(self, state):
        self.state = dict(state)


class SGD(Optimizer):
    """SGD with (heavy-ball) momentum, as in the paper's MNIST training."""

    def __init__(self, lr, momentum=0.9):
        super().__init__(lr)
        self.momentum = momentum

    def _update(self, g, lr):
        v = self.state.get("velocity", np.zeros_like(g))
        self.state["velocity"] = v = self.momentum * v + g
        return lr * v


class Adam(Optimizer):
    def __init__(self, lr, b1=0.9, b2=0.999, eps=1e-8):
        super().__init__(lr)
        self.b1, self.b2, self.eps = b1, b2, eps

    def _update(self, g, lr):
        s = self.state
        m = s["m"] = self.b1 * s.get("m", np.zeros_like(g)) + (1 - self.b1) * g
        v = s["v"] = self.b2 * s.get("v", np.zeros_like(g)) + (1 - self.b2) * g ** 2
        mhat = m / (1 - self.b1 ** s["step"])
        vhat = v / (1 - self.b2 ** s["step"])
        return lr * mhat / (np.sqrt(vhat) + self.eps)


class RMSprop(Optimizer):
    """RMSprop; with momentum > 0 the scaled steps are accumulated as in TensorFlow's RMSProp
    (velocity = momentum * velocity + lr * g / (sqrt(avg g^2) + eps)), the variant that
    reproductions of Rezende and Mohamed's planar flows use (lr 1e-5, momentum 0.9)."""

    def __init__(self, lr, gamma=0.9, eps=1e-8, momentum=0.0):
        super().__init__(lr)
        self.gamma, self.eps, self.momentum = gamma, eps, momentum

    def _update(self, g, lr):
        avg = self.state["avg_sq"] = (self.gamma * self.state.get("avg_sq", np.zeros_like(g))
                                      + (1 - self.gamma) * g ** 2)
        step = lr * g / (np.sqrt(avg) + self.eps)
        if self.momentum:
            step = self.state["velocity"] = (self.momentum * self.state.get("velocity", 0.0)
                                             + step)
        return step


def machine():
    """What the numbers were measured on."""
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()}
    for module, package in (("numpy", "numpy"), ("scipy", "scipy"), ("autograd", "autograd"),
                            ("tensorflow", "tensorflow-cpu")):
        if module in sys.modules:
            try:
                info[module] = importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                info[module] = getattr(sys.modules[module], "__version__", "?")
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        info["gpus"] = [d.name for d in tf.config.list_physical_devices("GPU")]
    return info


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x
