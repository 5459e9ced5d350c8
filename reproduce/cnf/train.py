"""One training loop for every model of Figures 4 and 6, resumable to the same numbers.

A model's whole state (parameters, optimiser state, its own random generator, loss and NFE
history, step, seconds spent) is checkpointed every `every` iterations and at the end, so a run
killed and restarted with --resume repeats from the last checkpoint exactly the iterations that an
uninterrupted run would have done: the same batches, the same parameters.
"""
import time
import zlib

import numpy as np
from autograd import value_and_grad

from odeint_autograd import SolverStats


def model_rng(seed, key):
    """The random generator of one model: fixed by the run's --seed and the model's name."""
    return np.random.RandomState([seed, zlib.crc32(key.encode())])


def fit(run, key, params, loss, optimizer, n_iters, every=100, config=None):
    """Minimise loss(params, rng, step, stats) -> scalar for n_iters steps of `optimizer`.

    `stats` is a SolverStats that loss may hand to odeint (reset each step; its NFE go into the
    history). `config` (a dict: the settings that shape training) is stored in the checkpoint,
    and resuming from a checkpoint made with other settings or another seed is refused.
    Returns the final state dict: params, history (loss, nfe_f, nfe_b per step), step, seconds
    (training time, summed over resumed runs).
    """
    config = dict(config or {}, seed=run.seed)
    ckpt = run.checkpoint(key)
    state = ckpt.load()
    if state is None:
        state = {"params": params, "optimizer": optimizer.state_dict(),
                 "rng": model_rng(run.seed, key).get_state(), "step": 0, "seconds": 0.0,
                 "history": {"loss": [], "nfe_f": [], "nfe_b": []}, "config": config}
    elif state.get("config") != config:
        raise ValueError(f"{ckpt.path} was made with {state.get('config')}, not {config}: "
                         "resume with the same settings, or use another --checkpoint-dir")
    optimizer.load_state_dict(state["optimizer"])
    rng = np.random.RandomState()
    rng.set_state(state["rng"])
    params, history, stats = state["params"], state["history"], SolverStats()
    objective = value_and_grad(lambda p, step: loss(p, rng, step, stats))
    start, started = state["step"], time.time()
    if getattr(run.args, "evaluate_only", False):
        n_iters = start  # evaluate as the checkpoint stands
    steps = range(start, n_iters)
    for step in (run.progress(steps, desc=key, total=len(steps)) if len(steps) else steps):
        stats.reset()
        value, grads = objective(params, step)
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
    state["params"] = params
    return state
