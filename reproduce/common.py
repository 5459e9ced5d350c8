"""What every experiment shares: its command line (`Run`: mode, seed, output and checkpoint
folders, the selection of its units of work), checkpoints that refuse to resume a different run,
optimisers with savable state, the resumable training loop (`fit`), progress bars, figures and
the results file.

An experiment is a package reproduce/NAME/ whose `experiment` module has SETTINGS (one dict per
mode), CHOICES, `units(run)` (the names of its independent units of work: one trained model
each, checkpointed as KEY.ckpt) and `main(argv)`; its `figures` module draws, and its `report`
module renders its section of figures/RESULTS.md from its results.json.
"""
import argparse
import concurrent.futures
import datetime
import hashlib
import importlib.metadata
import json
import multiprocessing
import os
import pickle
import platform
import shlex
import sys
import tempfile
import time
import unittest.mock
import zlib

import numpy as np
from autograd.misc import flatten

from odeint_autograd import SolverStats

MODES = ("smoke", "quick", "full")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Flags that say where and how far a run goes but never change its numbers; every other flag,
# and the mode, is part of the configuration a checkpoint must match to be resumed.
BOOKKEEPING_FLAGS = {"mode", "resume", "out", "checkpoint_dir", "evaluate_only", "stop_after",
                     "only", "train_only", "train_only_n", "models", "data_dir", "download",
                     "no_memory", "no_figure3", "checkpoint_every", "weights_dir"}
LOG_2PI = np.log(2 * np.pi)


REFUSED = 2  # the exit code of a command refused as given (argparse's): rerunning it won't do


class CheckpointError(Exception):
    """A checkpoint that cannot be resumed: unreadable, corrupted, or made by another run."""


class UsageError(Exception):
    """A bad command-line value found after parsing (python -m reproduce prints it, exits 2)."""


def _number(kind, text):
    """text as a number of the given kind (int or float), or the argparse error naming it."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a{'n integer' if kind is int else ' number'}:"
                                         f" {text!r}") from None


def positive(kind):
    """An argparse type: a positive number of the given kind (int or float)."""
    def parse(text):
        value = _number(kind, text)
        if not value > 0 or value != value or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be positive and finite, not {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


SEED_MAX = 2 ** 31 - 1  # the generators take seeds below 2**32, and runs add small offsets


def seed_arg(text):
    """An argparse type: a random seed, an integer from 0 to SEED_MAX."""
    value = _number(int, text)
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"a seed is an integer from 0 to {SEED_MAX}, not {text}")
    return value


def unwritable(folder):
    """Why a run could not write files into `folder` (None if it can): its nearest existing
    folder must take a new entry, which is tried (and removed) so that permissions, read-only
    and virtual file systems all answer as they would to the run."""
    path = os.path.abspath(folder)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        return f"{path} is not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".writable-", dir=path))
    except OSError as e:
        return f"cannot write in {path} ({e.strerror or e})"
    return None


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line, without the usage text, and that takes no
    abbreviated flags: the runner passes flags on by their full names (--resume once, folder
    flags made absolute), so "--resum" or "--out-" would slip past it."""

    def __init__(self, **kwargs):
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message):
        self.exit(REFUSED, f"{self.prog}: error: {message} (see --help)\n")


class Run:
    """One run of one experiment: mode, seed, output folder, checkpoints, timing, results."""

    def __init__(self, name, argv=None, extra_args=None, description=None, bookkeeping=(),
                 selecting=lambda args: ()):
        """selecting(args): the names of the experiment's own flags that, given, make the run
        train some units and stop without evaluating (as --only does)."""
        self.bookkeeping = BOOKKEEPING_FLAGS | set(bookkeeping)
        self._selecting = selecting
        parser = Parser(prog=f"python -m reproduce {name}", description=description,
                        epilog="--executor local | processes [--workers N] | ray [--workers N | "
                               "--address ADDR]: where the units of work run (local: one after "
                               "another in this process, the default; see reproduce/runner.py)")
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--smoke", dest="mode", action="store_const", const="smoke",
                          help="seconds: tiny settings, for the tests")
        mode.add_argument("--quick", dest="mode", action="store_const", const="quick",
                          help="minutes on a 2-core CPU (default)")
        mode.add_argument("--full", dest="mode", action="store_const", const="full",
                          help="the paper's protocol")
        parser.add_argument("--seed", type=seed_arg, default=0)
        parser.add_argument("--resume", action="store_true",
                            help="continue from this mode's checkpoints where they exist")
        parser.add_argument("--out", default=None,
                            help=f"output folder (default figures/{name} for --full, "
                                 f"figures/{name}/<mode> otherwise)")
        parser.add_argument("--checkpoint-dir", default=None,
                            help=f"default checkpoints/{name}/<mode>")
        parser.add_argument("--weights-dir", default=None,
                            help=f"where finished models keep their final weights (default "
                                 f"weights/{name} for --full, committed; <checkpoint-dir>/final "
                                 "otherwise)")
        parser.add_argument("--only", nargs="+", metavar="UNIT", default=None,
                            help="train (or, with --resume, continue) only these units of work "
                                 "and stop, without evaluating: several such runs can share the "
                                 "cores; a later run without it trains what is left and "
                                 "evaluates (python -m reproduce units NAME lists them)")
        parser.add_argument("--evaluate-only", action="store_true",
                            help="train nothing: evaluate each unit as its checkpoint, else "
                                 "its final weights, stand, and record how far each trained; "
                                 "for an honest report of a full run cut short")
        parser.add_argument("--stop-after", type=positive(int), default=None,
                            help="stop after this many training steps as if killed (to test "
                                 "--resume)")
        if extra_args is not None:
            extra_args(parser)
        self.parser = parser
        self.args = parser.parse_args([] if argv is None else list(argv))
        self.argv = [] if argv is None else list(argv)
        self.name = name
        self.mode = self.args.mode or "quick"
        self.seed = self.args.seed
        # full runs write figures/<name>/ (committed, shown in the README); quick and smoke runs
        # write figures/<name>/<mode>/ so that they never overwrite a full run's results
        default_out = os.path.join(ROOT, "figures", name)
        if self.mode != "full":
            default_out = os.path.join(default_out, self.mode)
        # absolute: a unit of work runs in a process of its own, in the repository's folder
        self.out_dir = os.path.abspath(self.args.out or default_out)
        self.ckpt_dir = os.path.abspath(self.args.checkpoint_dir or os.path.join(
            ROOT, "checkpoints", name, self.mode))
        self.weights_dir = os.path.abspath(self.args.weights_dir or (
            os.path.join(ROOT, "weights", name) if self.mode == "full"
            else os.path.join(self.ckpt_dir, "final")))
        for flag, given, folder in (
                ("--out", self.args.out, self.out_dir),
                ("--checkpoint-dir", self.args.checkpoint_dir, self.ckpt_dir),
                ("--weights-dir", self.args.weights_dir, self.weights_dir)):
            if given is not None and not given.strip():
                self.usage_error(f"{flag} {given!r}: an empty folder name")
            if self.args.evaluate_only and flag != "--out":
                continue  # only read (a read-only checkout's committed weights evaluate)
            problem = unwritable(folder)
            if problem:  # found now, not when the run has trained and writes its results
                self.usage_error(f"{flag} {folder}: {problem}")
        if self.args.evaluate_only:
            self._check_evaluate_only()
        self.started = time.time()
        self.stopper = StopAfter(self.args.stop_after)
        self._bar = None

    def selection_flags(self):
        """The flags given that make this run train some units and stop without evaluating:
        --only, and the experiment's own (`selecting`)."""
        return [f"--{name.replace('_', '-')}" for name in ("only", *self._selecting(self.args))
                if getattr(self.args, name) is not None]

    def _check_evaluate_only(self):
        """--evaluate-only trains nothing: refuse it beside flags that only train, and where
        there is nothing trained to evaluate (a mistyped folder would score untrained models)."""
        selecting = self.selection_flags()
        if selecting:
            self.usage_error(f"--evaluate-only trains nothing, {selecting[0]} "
                             "trains units and stops without evaluating: give one of them")
        if not any(os.path.isdir(folder) and any(f.endswith(".ckpt") for f in os.listdir(folder))
                   for folder in (self.ckpt_dir, self.weights_dir)):
            self.usage_error(f"--evaluate-only: nothing trained to evaluate, no checkpoint in "
                             f"{self.ckpt_dir} and no final weights in {self.weights_dir}")

    @property
    def config(self):
        """The mode and every flag that changes the numbers: what a checkpoint must match."""
        flags = {k: v for k, v in sorted(vars(self.args).items()) if k not in self.bookkeeping}
        return {"experiment": self.name, "mode": self.mode, **flags}

    @property
    def command(self):
        return "python -m reproduce " + " ".join(shlex.quote(a) for a in [self.name] + self.argv)

    def usage_error(self, message):
        """Refuse a flag value that parsing could not check (exit 2, one line)."""
        self.parser.error(message)

    def pick(self, smoke, quick, full):
        """The setting for this run's mode."""
        return {"smoke": smoke, "quick": quick, "full": full}[self.mode]

    def path(self, filename):
        """A file in the output folder (created on first use)."""
        os.makedirs(self.out_dir, exist_ok=True)
        return os.path.join(self.out_dir, filename)

    def checkpoint(self, key):
        return Checkpoint(os.path.join(self.ckpt_dir, f"{key}.ckpt"), enabled=self.args.resume)

    def log(self, key):
        """The per-step log kept beside a unit's checkpoint."""
        return AppendLog(os.path.join(self.ckpt_dir, f"{key}.log.jsonl"))

    def select(self, units, chosen=None):
        """The units this run trains: `units` (every unit of the experiment, in order) narrowed
        to those named by --only and to `chosen` (an experiment's own selection flags) when
        given. A name that is not a unit, or flags that together select none, is a usage
        error."""
        unknown = [u for u in self.args.only or () if u not in units]
        if unknown:
            self.usage_error(f"--only: unknown unit(s) {', '.join(unknown)}; this run's units: "
                             f"{' '.join(units)}")
        selected = [u for u in units if (self.args.only is None or u in self.args.only)
                    and (chosen is None or u in chosen)]
        if not selected and self.args.only:  # chosen is not None, then
            self.usage_error(f"--only {' '.join(self.args.only)}: none of these is among the "
                             f"units the other flags choose ({' '.join(chosen) or 'none'})")
        return selected

    @property
    def partial(self):
        """Whether this run trains a selection of units only and stops before evaluating
        (selection_flags)."""
        return bool(self.selection_flags())

    def final_weights(self, key):
        """Where a finished model's final state is kept (a full run's are committed, so that a
        fresh clone evaluates them with --evaluate-only)."""
        return Checkpoint(os.path.join(self.weights_dir, f"{key}.ckpt"))

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

    def write(self, line):
        """Print a line on stdout above the progress bar while one runs (tqdm.write), else
        plainly."""
        if self._bar is None:
            print(line, flush=True)
        else:
            self._bar.write(line, file=sys.stdout)
            sys.stdout.flush()

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
            "config": self.config,
            "date": now(),
            "duration_s": round(time.time() - self.started, 1),
            "machine": machine(),
            "choices": choices or {},
            "results": results,
        }
        write_json(self.path(filename), record)
        return record


def now():
    """The current UTC time to the second, ISO 8601: every results file's date."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_json(path, record, indent=2):
    """Write a JSON file atomically (numpy values as plain numbers, non-finite floats as null)."""
    _write_atomic(path, (json.dumps(jsonable(record), indent=indent) + "\n").encode())


def write_benchmark(path, record, show):
    """A benchmark's ending: show(record) prints its table, the record goes to path (JSON)."""
    show(record)
    write_json(path, record, indent=1)
    print(f"wrote {os.path.relpath(path, ROOT)}")
    return record


def read_json(path):
    """A JSON file's contents, or None if there is no such file."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path, dpi=120, tight=True):
    """Write a figure to `path` and free it."""
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)


def _write_atomic(path, data):
    """Write a whole file or nothing: a kill mid-write leaves the previous file in place."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def config_diff(saved, config, ignore=()):
    """The keys on which two configurations differ (a key missing from one differs), sorted."""
    return sorted(k for k in set(saved) | set(config)
                  if k not in ignore and saved.get(k) != config.get(k))


def unit_config(run, key, n_iters, clip=None, validate=None, validate_every=None, config=None):
    """The configuration a unit trained by `fit` is saved with (its checkpoint and weights must
    match it): the run's, the unit's name and schedule, and the model's own settings."""
    return dict(run.config, model=key, n_iters=n_iters, clip=clip,
                validate_every=validate_every if validate else None, **(config or {}))


class Checkpoint:
    """A pickled state dict with a SHA-256 of its bytes, written atomically. `load` returns None
    unless resuming (or forced) and the file exists, and raises CheckpointError for a file that is
    truncated, corrupted or made with another configuration."""

    MAGIC = b"neural-odes-checkpoint v1\n"
    HEAD = len(MAGIC) + 64  # the magic line, then the payload's SHA-256 in hex

    def __init__(self, path, enabled=True):
        self.path, self.enabled = path, enabled

    def _fail(self, what):
        return CheckpointError(f"{self.path}: {what}; rerun without --resume (nor "
                               "--evaluate-only, which reads it as it stands) to start afresh, "
                               "or delete the file")

    def load(self, config=None, force=False, ignore=()):
        """The saved state, or None. With `config`, the state's "config" must equal it (but for
        the keys in `ignore`)."""
        if not ((self.enabled or force) and os.path.exists(self.path)):
            return None
        try:
            with open(self.path, "rb") as f:
                blob = f.read()
        except (IsADirectoryError, PermissionError) as e:  # others (NFS's) may pass: retried
            raise self._fail(f"unreadable ({e.strerror or e})") from None
        if not blob.startswith(self.MAGIC) or len(blob) <= self.HEAD:
            raise self._fail("not a checkpoint of this project, or truncated")
        digest, payload = self._recorded(blob), blob[self.HEAD:]
        if hashlib.sha256(payload).hexdigest() != digest:
            raise self._fail("corrupted (its checksum does not match)")
        try:
            state = pickle.loads(payload)
        except Exception as e:  # noqa: BLE001 -- any unpickling failure is a bad file
            raise self._fail(f"unreadable ({type(e).__name__})") from None
        if not isinstance(state, dict):
            raise self._fail("not a checkpoint of this project")
        saved = state.get("config") or {}
        diff = [] if config is None else config_diff(saved, config, ignore)
        if diff:
            raise self._fail("made with other settings (" + ", ".join(
                f"{k}: {saved.get(k)!r} there, {config.get(k)!r} here" for k in diff) + ")")
        return state

    def digest(self):
        """The SHA-256 its file records of its contents (None if there is no file): what a
        results file keeps to tell whether the weights it scored are still these."""
        if not os.path.exists(self.path):
            return None
        with open(self.path, "rb") as f:
            return self._recorded(f.read(self.HEAD)) or None

    def _recorded(self, head):
        return head[len(self.MAGIC):self.HEAD].decode("ascii", "replace")

    def save(self, state):
        payload = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        _write_atomic(self.path,
                      self.MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload)


class AppendLog:
    """A per-step log kept beside a checkpoint as JSON lines, so that a save costs the same
    however long the run has been: the checkpoint records how many bytes of the log it covers,
    and a resumed run cuts the log back to that point before appending."""

    def __init__(self, path):
        self.path = path

    def restore(self, size):
        """Cut the log back to `size` bytes (0: start a new log)."""
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        if size and (not os.path.exists(self.path) or os.path.getsize(self.path) < size):
            raise CheckpointError(f"{self.path}: shorter than its checkpoint says; rerun "
                                  "without --resume to start afresh")
        with open(self.path, "ab") as f:
            f.truncate(size)

    def append(self, record):
        with open(self.path, "a") as f:
            f.write(json.dumps(jsonable(record)) + "\n")

    def size(self):
        return os.path.getsize(self.path) if os.path.exists(self.path) else 0

    def read(self, size=None, start=0):
        """Every record from byte `start` up to byte `size` (the end without it)."""
        if not os.path.exists(self.path):
            return []
        with open(self.path, "rb") as f:
            f.seek(start)
            data = f.read() if size is None else f.read(size - start)
        try:
            return [json.loads(line) for line in data.splitlines() if line.strip()]
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError: damaged contents
            raise CheckpointError(f"{self.path}: unreadable ({type(e).__name__}: {e}); delete "
                                  "it with its checkpoint to start afresh") from None


def model_rng(seed, key):
    """The random generator of one model: fixed by the run's --seed and the model's name."""
    return np.random.RandomState([seed, zlib.crc32(key.encode())])


def global_norm_clip(grads, max_norm):
    """grads scaled so that their global L2 norm is at most max_norm (None: unchanged); returns
    (grads, the norm before clipping)."""
    g, unflatten = flatten(grads)
    norm = float(np.sqrt(np.dot(g, g)))
    if max_norm is None or norm <= max_norm:
        return grads, norm
    return unflatten(g * (max_norm / norm)), norm


def fit(run, key, params, objective, optimizer, n_iters, every=100, config=None, rng=None,
        lr_factor=None, clip=None, validate=None, validate_every=None, stop_at=None,
        initial=None):
    """Minimise with objective(params, rng, step, stats) -> (loss, grads) for n_iters steps of
    `optimizer`, resumable to the same numbers.

    The state (parameters, optimiser state, the model's random generator - model_rng(seed, key)
    unless `rng` is given -, step, training seconds, the best validated parameters) is
    checkpointed every `every` steps and at the end; the per-step loss, NFE and gradient norm go
    to an AppendLog beside it. A run killed and restarted with --resume repeats exactly the steps
    an uninterrupted run would have done. `stats` is a SolverStats the objective may hand to
    odeint (reset each step). The checkpoint must match `config` (the model's settings) together
    with the run's own configuration (mode, seed, every flag that changes numbers).
    lr_factor(step) scales the optimiser's learning rate; clip caps the gradient's global norm.
    validate(params) -> score (lower is better) runs every `validate_every` steps and at the
    end; state["best"] keeps the parameters, step and score of the best one.
    A model that finishes also writes its final weights (Run.final_weights; _final), and with
    --resume a model whose checkpoint is gone but whose final weights are there is finished. With
    --evaluate-only nothing is trained: the state is the checkpoint as it stands, else the final
    weights, else the untrained parameters.
    `run.stopper.tick()` runs after every step (--stop-after: tests use it to simulate a kill).
    stop_at: train only up to this step of the n_iters (validated and checkpointed there; no
    final weights). initial(): called only when there is neither a checkpoint nor final weights
    to go on from, returns the state to start from instead of step 0 (another unit's state with
    its per-step records under "log_records", which start this unit's log).
    Returns the state dict, with state["history"] read back from the log.
    """
    config = unit_config(run, key, n_iters, clip, validate, validate_every, config)
    ckpt, log, weights = run.checkpoint(key), run.log(key), run.final_weights(key)
    if run.args.evaluate_only:
        return _trained_state(ckpt, log, weights, config, params)
    state = ckpt.load(config)
    if state is None and run.args.resume:
        final = weights.load(config, force=True)
        if final is not None:
            return _with_history(final)  # finished, kept as weights
    records = []
    if state is None and initial is not None:
        state = dict(initial(), config=config, log_size=0)
        records = state.pop("log_records")
    if state is None:
        state = {"params": params, "optimizer": optimizer.state_dict(),
                 "rng": (rng or model_rng(run.seed, key)).get_state(), "step": 0,
                 "seconds": 0.0, "log_size": 0, "best": None, "validation": [],
                 "config": config}
    log.restore(state["log_size"])
    for record in records:
        log.append(record)
    optimizer.load_state_dict(state["optimizer"])
    rng = np.random.RandomState()
    rng.set_state(state["rng"])
    params, stats, base_lr = state["params"], SolverStats(), optimizer.lr
    start, started = state["step"], time.time()

    def checkpoint(step):
        nonlocal started
        if validate is not None and (step % validate_every == 0 or step in (n_iters, stop_at)):
            score = float(validate(params))
            state["validation"].append({"step": step, "score": score})
            if state["best"] is None or score < state["best"]["score"]:
                state["best"] = {"params": params, "step": step, "score": score}
        state.update(params=params, optimizer=optimizer.state_dict(), rng=rng.get_state(),
                     step=step, log_size=log.size(),
                     seconds=state["seconds"] + time.time() - started)
        started = time.time()
        ckpt.save(state)

    steps = range(start, n_iters if stop_at is None else min(stop_at, n_iters))
    for step in (run.progress(steps, desc=key, total=len(steps)) if len(steps) else steps):
        stats.reset()
        value, grads = objective(params, rng, step, stats)
        if not np.isfinite(value):
            raise FloatingPointError(f"{key}: the loss became {value} at step {step}")
        grads, norm = global_norm_clip(grads, clip)
        lr = base_lr * (1.0 if lr_factor is None else lr_factor(step))
        params = optimizer.step(params, grads, lr=lr)
        log.append({"loss": float(value), "nfe_f": stats.forward.nfe,
                    "nfe_b": stats.backward.nfe, "grad_norm": norm, "lr": lr})
        run.set_postfix(loss=float(value), nfe_f=stats.forward.nfe, nfe_b=stats.backward.nfe)
        if (step + 1) % every == 0 or step + 1 in (n_iters, stop_at) or (
                validate is not None and (step + 1) % validate_every == 0):
            checkpoint(step + 1)
        run.stopper.tick()
    state["params"] = params
    state["history"] = _history(log.read(state["log_size"]))
    if state["step"] == n_iters:
        weights.save(_final(state))
    return state


HISTORY = ("loss", "nfe_f", "nfe_b")
HISTORY_POINTS = 20_000  # final weights keep at most this many points of a training curve


def _history(records):
    """A training curve from per-step log records: each of HISTORY per step, and the step
    numbers ("iteration", from 1) to plot it against."""
    return {**{k: [r[k] for r in records] for k in HISTORY},
            "iteration": list(range(1, len(records) + 1))}


def _final(state):
    """What a finished model keeps beside the repository's results (Run.final_weights): its
    parameters, best validated parameters, configuration and training time, the means of its
    per-step NFE, and its training curve (every step up to HISTORY_POINTS, else that many evenly
    spaced, the last included) as float32/int32 arrays."""
    h, steps = state["history"], len(state["history"]["loss"])
    index = np.unique(np.linspace(0, steps - 1, min(steps, HISTORY_POINTS)).round().astype(int))
    keep = ("params", "best", "validation", "step", "seconds", "config", "starts")
    return {**{k: state[k] for k in keep if k in state}, "history_index": index,
            "history": {"loss": np.asarray(h["loss"], np.float32)[index],
                        "nfe_f": np.asarray(h["nfe_f"], np.int32)[index],
                        "nfe_b": np.asarray(h["nfe_b"], np.int32)[index]},
            "history_means": {k: float(np.mean(h[k])) if steps else None for k in HISTORY}}


def _trained_state(ckpt, log, weights, config, params):
    """A model for evaluation only: its checkpoint as it stands, else its final weights, else
    the untrained `params` (step 0). Histories come back as lists."""
    state = ckpt.load(config, force=True)
    if state is not None:
        state["history"] = _history(log.read(state["log_size"]))
        return state
    state = weights.load(config, force=True)
    if state is None:
        return {"params": params, "step": 0, "seconds": 0.0, "best": None, "validation": [],
                "config": config, "history": _history([])}
    return _with_history(state)


def _with_history(final):
    """Final weights (_final) as a state, their history as lists, with the step number of each
    point kept (a thinned curve's points are not consecutive steps)."""
    final["history"] = {k: v.tolist() for k, v in final["history"].items()}
    final["history"]["iteration"] = (np.asarray(final["history_index"]) + 1).tolist()
    return final


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

    def __init__(self, limit=None):
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


BLAS_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")  # read at import


def cpus():
    """The CPUs this process may run on (its affinity where the system tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def in_processes(fn, tasks, workers):
    """(key, fn(*args)) for each key -> args of `tasks` (a dict), in the order they finish: in
    `workers` fresh processes ("spawn": each gets its arguments and nothing else, and runs BLAS
    on one thread, as every unit of work does), or one after another in this process (on its own
    threads) where workers is 1 or there is one task. fn is a module-level function whose result
    depends on its arguments alone, so where it ran does not change it. The first exception a
    task raises, or BrokenProcessPool where a worker died, is raised here and cancels the tasks
    not started (those running finish before the interpreter exits)."""
    if workers < 1:
        raise ValueError(f"in_processes: workers must be at least 1, not {workers}")
    if workers == 1 or len(tasks) <= 1:
        for key, args in tasks.items():
            yield key, fn(*args)
        return
    # read by each worker as submit starts it; this process's environment restored after
    with unittest.mock.patch.dict(os.environ, {v: "1" for v in BLAS_THREADS}):
        pool = concurrent.futures.ProcessPoolExecutor(
            min(workers, len(tasks)), mp_context=multiprocessing.get_context("spawn"))
        futures = {pool.submit(fn, *args): key for key, args in tasks.items()}
    try:
        for future in concurrent.futures.as_completed(futures):
            yield futures[future], future.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


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
        info["tf_enable_onednn_opts"] = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f
                               if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return info


def jsonable(x):
    """x with numpy arrays and scalars as lists and numbers, non-finite floats as None."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x
