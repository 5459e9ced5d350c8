"""The pieces of the paper's latent ODE (Section 5, Appendix E) shared by the spirals and the
Poisson process experiments: small MLPs (with a hand-written VJP so that the adjoint's backward
solve does not trace them with autograd at every step), the recognition RNN that reads a series
backwards in time and gives q(z0 | x), the Gaussian and KL terms of the ELBO, the solve of a
batch of series with different observation times in one odeint call, Adam on common.fit, and
the solver flags and measurements both experiments report.

Parameters are plain dicts of numpy arrays; every model is a function of them.
"""
import argparse
import time

import autograd.numpy as anp
import numpy as np
from autograd.scipy.special import expit

from odeint_autograd import SolverStats, odeint
from reproduce.common import (LOG_2PI, Adam, CheckpointError, config_diff, fit, model_rng,
                              positive, unit_config)
from reproduce.markdown import table

# ---------------------------------------------------------------------------------------------
# Activations: an autograd.numpy function (for traced evaluation), and a plain numpy one that
# returns the value and the derivative together (for the hand-written VJP).


def elu(x):
    return anp.where(x > 0, x, anp.exp(anp.minimum(x, 0.0)) - 1.0)


def relu(x):
    return anp.maximum(x, 0.0)


def _elu_and_derivative(x):
    e = np.exp(np.minimum(x, 0.0))
    positive = x > 0
    return np.where(positive, x, e - 1.0), np.where(positive, 1.0, e)


def _tanh_and_derivative(x):
    h = np.tanh(x)
    return h, 1.0 - h * h


ACTIVATIONS = {
    "elu": (elu, _elu_and_derivative),
    "relu": (relu, lambda x: (np.maximum(x, 0.0), (x > 0).astype(float))),
    "tanh": (anp.tanh, _tanh_and_derivative),
}


def linear_init(rng, n_in, n_out):
    """W, b ~ U(-1/sqrt(n_in), 1/sqrt(n_in)) (PyTorch's nn.Linear default, as in the authors'
    public example)."""
    bound = 1.0 / np.sqrt(n_in)
    return rng.uniform(-bound, bound, (n_in, n_out)), rng.uniform(-bound, bound, n_out)


def init_mlp(rng, n_in, n_hidden, n_out):
    """An MLP n_in -> n_hidden -> n_out; n_hidden an int (one hidden layer) or a tuple of
    widths. Parameters W1, b1, ..., WL, bL in layer order."""
    sizes = [n_in, *np.atleast_1d(n_hidden).tolist(), n_out]
    params = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]), 1):
        params[f"W{i}"], params[f"b{i}"] = linear_init(rng, a, b)
    return params


def mlp(p, x, act="elu"):
    """act(... act(x W1 + b1) ...) WL + bL over the last axis of x (any leading shape)."""
    depth = len(p) // 2
    for i in range(1, depth):
        x = ACTIVATIONS[act][0](anp.dot(x, p[f"W{i}"]) + p[f"b{i}"])
    return x @ p[f"W{depth}"] + p[f"b{depth}"]


def mlp_vjp(p, x, g, act="elu"):
    """(mlp(p, x), g^T d mlp/dx, g^T d mlp/dp) in plain numpy, for x of shape (B, n_in)."""
    depth = len(p) // 2
    inputs, slopes = [x], []
    for i in range(1, depth):
        h, dh = ACTIVATIONS[act][1](inputs[-1] @ p[f"W{i}"] + p[f"b{i}"])
        inputs.append(h)
        slopes.append(dh)
    out = inputs[-1] @ p[f"W{depth}"] + p[f"b{depth}"]
    grads = {}
    for i in range(depth, 0, -1):  # g: the cotangent of layer i's output
        grads[f"W{i}"], grads[f"b{i}"] = inputs[i - 1].T @ g, g.sum(0)
        if i > 1:
            g = (g @ p[f"W{i}"].T) * slopes[i - 2]
    return out, g @ p["W1"].T, {k: grads[k] for k in p}  # p's key order: odeint's leaves


class MLPDynamics:
    """dz/dt = mlp(theta, z): the latent ODE's time-invariant dynamics f(z, theta) (the paper's
    eq. 11). `value_and_vjp` gives odeint's adjoint f and its VJPs in one numpy pass."""

    def __init__(self, act="elu"):
        self.act = act

    def __call__(self, z, t, theta):
        return mlp(theta, z, self.act)

    def value_and_vjp(self, g, z, t, theta):
        f, g_z, g_theta = mlp_vjp(theta, z, g, self.act)
        return f, g_z, 0.0, (g_theta,)


# ---------------------------------------------------------------------------------------------
# Recurrent networks


def init_rnn(rng, n_in, n_hidden, n_out):
    """A vanilla RNN h' = tanh([x, h] Wh + bh) with a linear read-out h -> n_out."""
    Wh, bh = linear_init(rng, n_in + n_hidden, n_hidden)
    Wo, bo = linear_init(rng, n_hidden, n_out)
    return {"Wh": Wh, "bh": bh, "Wo": Wo, "bo": bo}


def init_gru(rng, n_in, n_hidden, n_out):
    """A GRU (update gate u, reset gate r): h' = (1 - u) h + u tanh([x, r h] Wh + bh), u and r
    sigmoids of [x, h] Wu + bu and [x, h] Wr + br; the same linear read-out as init_rnn."""
    p = init_rnn(rng, n_in, n_hidden, n_out)
    for gate in "ur":
        p["W" + gate], p["b" + gate] = linear_init(rng, n_in + n_hidden, n_hidden)
    return p


def rnn_step(p, h, x):
    """One step of the vanilla RNN (init_rnn) or of the GRU (init_gru), by the parameters."""
    xh = anp.concatenate([x, h], axis=-1)
    if "Wu" not in p:
        return anp.tanh(anp.dot(xh, p["Wh"]) + p["bh"])
    u = expit(anp.dot(xh, p["Wu"]) + p["bu"])
    r = expit(anp.dot(xh, p["Wr"]) + p["br"])
    candidate = anp.tanh(anp.dot(anp.concatenate([x, r * h], axis=-1), p["Wh"]) + p["bh"])
    return (1.0 - u) * h + u * candidate


def time_gaps(t0, times):
    """t_i - t_{i-1} for each series' sorted times (B, n), with t_0 = t0 before the first."""
    times = np.asarray(times, dtype=float)
    return np.diff(np.concatenate([np.full((len(times), 1), t0), times], axis=1), axis=1)


def encode(p, xs, gaps, mask=None):
    """q(z0 | x) = N(mu, diag(exp(logvar))) from the recognition RNN.

    xs (B, n, D) observations and gaps (B, n) the time since the previous observation (since t0
    for the first). The RNN reads [x_i, gap_i] from the last observation back to the first, so
    its final input says how far x_1 lies from t0; its read-out gives (mu, logvar). mask (B, n),
    for series of different lengths padded at the end: padded steps leave h unchanged."""
    h = np.zeros((xs.shape[0], p["Wh"].shape[1]))
    for i in range(xs.shape[1] - 1, -1, -1):
        h_new = rnn_step(p, h, anp.concatenate([xs[:, i], gaps[:, i:i + 1]], axis=1))
        h = h_new if mask is None else anp.where(mask[:, i:i + 1], h_new, h)
    out = anp.dot(h, p["Wo"]) + p["bo"]
    d = out.shape[1] // 2
    return out[:, :d], out[:, d:]


# ---------------------------------------------------------------------------------------------
# ELBO pieces

def gaussian_log_density(x, mean, log_std):
    """log N(x; mean, exp(log_std)^2), elementwise."""
    return -0.5 * (LOG_2PI + 2 * log_std + ((x - mean) / anp.exp(log_std)) ** 2)


def kl_to_standard_normal(mu, logvar):
    """KL(N(mu, diag(exp(logvar))) || N(0, I)) per row, in closed form."""
    return 0.5 * anp.sum(anp.exp(logvar) + mu ** 2 - 1.0 - logvar, axis=-1)


def sample_z0(mu, logvar, eps):
    """The reparameterised sample z0 = mu + sigma * eps."""
    return mu + anp.exp(0.5 * logvar) * eps


# ---------------------------------------------------------------------------------------------
# One solve for a batch of series with different observation times


def union_times(t0, times):
    """The sorted union of all series' times with t0 first, and where each series' times sit.

    times (B, n), none before t0. Returns (t_union, rows) with
    t_union[rows[b, i]] == times[b, i]."""
    times = np.asarray(times, dtype=float)
    if times.ndim != 2:
        raise ValueError(f"times must be (series, observations), not of shape {times.shape}")
    if np.any(times < t0):
        raise ValueError(f"observation times must not precede t0 = {t0}")
    t_union, inverse = np.unique(np.concatenate([[t0], times.ravel()]), return_inverse=True)
    return t_union, inverse[1:].reshape(times.shape)


def solve_union(func, z0, t0, times, args=(), **solver):
    """z(t) of every series at its own times, from one odeint call.

    z0 (B, d) at t0; times (B, n). The batch is solved once on the sorted union of all times and
    each series keeps its own rows (a mask over the union, done as a gather: the states at times
    a series does not observe get no gradient). Returns (B, n, d)."""
    t_union, rows = union_times(t0, times)
    if len(t_union) < 2:  # every series observed only at t0
        return anp.repeat(z0[:, None, :], np.shape(times)[1], axis=1)
    zs = odeint(func, z0, t_union, args=args, **solver)  # (T, B, d)
    return zs[rows, np.arange(len(z0))[:, None]]


# ---------------------------------------------------------------------------------------------
# Training with checkpoints


def train(run, key, init, loss_and_grad, n_iters, lr, ckpt_every, seed=None, lr_final=None,
          clip=None, validate=None, validate_every=None, config=None, rng_key=None, starts=1,
          start_iters=None, extends=None):
    """Adam on loss_and_grad(params, rng, stats) -> (loss, grads) through common.fit (resumable
    to the same numbers); init(rng) draws the parameters from the model's own generator, seeded
    by (seed, rng_key or key) (seed: the run's --seed unless given; rng_key: another unit's key,
    to start from its draws). The learning rate decays exponentially from lr to lr_final over the
    n_iters steps (constant if lr_final is None); clip caps the gradient's global norm;
    validate(params) -> score picks the best parameters (state["best"]).

    starts > 1: random restarts. Each of `starts` draws (the first from the unit's own generator,
    start j from (seed, rng_key or key, "start j")) trains start_iters steps of this same
    schedule as its own unit KEY_startJ; the one with the lowest validation score then goes on,
    with its optimiser and generator, to n_iters as this unit (state["starts"]: their scores;
    state["seconds"]: every start's time).

    extends=(unit, steps): train on from the final weights of `unit`, a finished unit of this
    same training but for its name and its `steps` iterations, to n_iters: the learning rate runs
    that schedule's last n_iters - steps steps again, Adam's moments start afresh (final weights
    do not keep them), the generator is (seed, rng_key or key), and its checks, best parameters,
    restarts, time and training curve carry on. Should `unit` change later (trained again),
    this unit is refused, as its checks no longer begin with that unit's."""
    seed = run.seed if seed is None else seed
    span = extends[1] if extends else n_iters
    if not 0 < span <= n_iters <= 2 * span:  # the replay must lie within the old schedule
        raise ValueError(f"{key}: extends a unit of {span} steps to n_iters={n_iters}, not to "
                         f"between {span} and {2 * span}")
    decay = None if lr_final is None else (
        lambda step: (lr_final / lr) ** ((step if step < span else step - n_iters + span) / span))
    config = dict(config or {}, seed=seed, lr=lr, lr_final=lr_final)
    if starts > 1:
        if validate is None or not 0 < (start_iters or 0) < n_iters:
            raise ValueError(f"{key}: restarts need a validation score and 0 < start_iters < "
                             f"n_iters, not start_iters={start_iters}, n_iters={n_iters}")
        config.update(starts=starts, start_iters=start_iters)

    def run_fit(unit, rng, **kwargs):
        return fit(run, unit, init(rng), lambda p, r, step, stats: loss_and_grad(p, r, stats),
                   Adam(lr), n_iters, every=ckpt_every, rng=rng, lr_factor=decay, clip=clip,
                   validate=validate, validate_every=validate_every, config=config, **kwargs)

    def best_start():
        tried = []
        for j in range(starts):
            suffix = "" if j == 0 else f"_start{j}"
            rng = model_rng(seed, (rng_key or key) + suffix)
            state = run_fit(f"{key}_start{j}", rng, stop_at=start_iters)
            tried.append((state["validation"][-1]["score"], j, state))
        starts_tried = [{"start": i, "validation_score": s, "step": start_iters}
                        for s, i, _ in tried]
        j = chosen_start(starts_tried)
        state = tried[j][2]
        records = run.log(f"{key}_start{j}").read(state["log_size"])
        state = {k: v for k, v in state.items() if k not in ("history", "config", "log_size")}
        state["log_records"] = records
        state["seconds"] = sum(c[2]["seconds"] for c in tried)
        state["starts"] = starts_tried
        return state

    def extended():
        unit, steps = extends
        state = run.final_weights(unit).load(force=True)
        if state is None:
            raise CheckpointError(f"{key} trains on from the final weights of {unit}, which are "
                                  "missing: train it first")
        made = state.get("config") or {}
        same = unit_config(run, unit, steps, clip, validate, validate_every,
                           {k: v for k, v in config.items() if k != "extends"})
        wrong = [f"{k}={made.get(k)!r} (not {same.get(k)!r})" for k in config_diff(made, same)]
        if state["step"] != steps:
            wrong.append(f"{state['step']} iterations (not {steps})")
        if wrong:
            raise CheckpointError(f"{key} trains on from the final weights of {unit}, which are "
                                  "of other settings: " + ", ".join(wrong))
        history = state["history"]
        if len(history["loss"]) != steps:
            raise CheckpointError(f"{key}: the finished unit's training curve keeps "
                                  f"{len(history['loss'])} of its {steps} steps (thinned), so "
                                  "it cannot carry on as this unit's")
        return {**{k: state[k] for k in ("params", "step", "seconds", "best", "validation")},
                **({"starts": state["starts"]} if "starts" in state else {}),
                "optimizer": Adam(lr).state_dict(),
                "rng": model_rng(seed, rng_key or key).get_state(),
                "log_records": [{"loss": float(loss), "nfe_f": int(f), "nfe_b": int(b)}
                                for loss, f, b in zip(history["loss"], history["nfe_f"],
                                                      history["nfe_b"])]}

    if extends:
        if run.args.resume or run.args.evaluate_only:  # going on from this unit's own state
            mine = run.checkpoint(key).load(force=True) or run.final_weights(key).load(force=True)
            source = mine and run.final_weights(extends[0]).load(force=True)
            if source and not carries_on(mine, source):
                raise CheckpointError(
                    f"{key} trained on from {extends[0]}, which has changed since (its checks "
                    f"do not begin this unit's): delete {key}'s checkpoint and final weights "
                    f"to train it on again from {extends[0]} as it is now, or restore "
                    f"{extends[0]}'s earlier weights")
    initial = extended if extends else best_start if starts > 1 else None
    return run_fit(key, model_rng(seed, rng_key or key), initial=initial)


def carries_on(state, source):
    """Whether a unit's state (train's extends) still carries on `source`'s, the finished
    unit's it trained on from: its checks begin with source's (not so once source is trained
    again)."""
    return state["validation"][:len(source["validation"])] == source["validation"]


def chosen_start(starts):
    """The start that goes on among a unit's random restarts (state["starts"]): the lowest
    validation score, the first start on a tie."""
    return min(starts, key=lambda s: (s["validation_score"], s["start"]))["start"]


def training_summary(state):
    """Iterations, time and mean NFE per iteration of a `train` state (the means over every
    step, also for final weights whose kept curve is thinned). With restarts, seconds_total
    includes the starts that were dropped, so the time per iteration counts their steps too
    (restart_iterations), start_chosen is the start that went on and start_scores each start's
    validation score at the end of the start phase."""
    history, means = state["history"], state.get("history_means") or {}

    def mean(key):
        return means.get(key, float(np.mean(history[key])) if history[key] else None)

    steps, starts = state["step"], state.get("starts") or []
    chosen = chosen_start(starts) if starts else None
    dropped = sum(s["step"] for s in starts if s["start"] != chosen)
    summary = {"iterations": steps, "seconds_total": float(state["seconds"]),
               "seconds_per_iteration": state["seconds"] / (steps + dropped) if steps else None,
               "nfe_forward_per_iteration": mean("nfe_f"),
               "nfe_backward_per_iteration": mean("nfe_b"),
               "final_loss": history["loss"][-1] if history["loss"] else None}
    if starts:
        summary.update(restart_iterations=dropped, start_chosen=chosen,
                       start_scores=[s["validation_score"] for s in starts])
    return summary


def add_solver_args(parser):
    """The solver flags both latent-ODE experiments take."""
    parser.add_argument("--method", default="adams", choices=["adams", "lsoda"],
                        help="odeint method (default adams: the faster here, measured)")
    parser.add_argument("--tol", type=_tolerance, default=None,
                        help="rtol = atol of every solve, below 1 (default: the mode's)")
    parser.add_argument("--no-seminorm", action="store_true",
                        help="full norm in the adjoint's error control")


def _tolerance(text):
    """An argparse type: a relative and absolute tolerance, positive and below 1."""
    value = positive(float)(text)
    if not value < 1:
        raise argparse.ArgumentTypeError(f"a tolerance is below 1, not {text}")
    return value


PAPER_TOL = 1.5e-8  # Section 6: the sequence models' tolerance, forward and backward


def solver_from_args(args, default_tol):
    """(odeint keyword arguments, their description for the results' choices)."""
    tol = args.tol or default_tol
    solver = dict(method=args.method, rtol=tol, atol=tol, adjoint_seminorm=not args.no_seminorm)
    text = (f"odeint method={args.method}, rtol = atol = {tol:g}, gradients by the adjoint"
            f"{' with the seminorm' if solver['adjoint_seminorm'] else ''}; ")
    if tol == PAPER_TOL:
        text += "the paper's tolerance"
    else:
        text += (f"looser than the paper's {PAPER_TOL:g} to fit the training in its time; the "
                 "trained model evaluated at several tolerances is in the results "
                 "(tolerance_effect*)")
    return solver, text


SPEED_REPEATS = 3  # measure_solvers keeps the fastest of this many gradients per setting


def measure_solvers(make_objective, params, tols, methods=("adams", "lsoda")):
    """Seconds and NFE of one training gradient for each method, tolerance and adjoint norm, and
    with the adjoint solved by the package's dopri5, bosh3 and rkf23 (their step size carried
    across the many output intervals, where scipy's solvers restart at each):
    make_objective(solver) -> loss_and_grad(params, rng, stats) as given to `train`. The
    seconds and NFE are the fastest of SPEED_REPEATS gradients' (a collection or a neighbour's
    burst in one does not count); "nfe_varied" lists every repeat's NFE where they differ,
    which a deterministic gradient never does."""
    rows = []
    for tol in tols:
        for method in methods:
            for seminorm in (False, True):
                for adjoint_method in (None, "dopri5", "bosh3", "rkf23"):
                    solver = dict(method=method, rtol=tol, atol=tol, adjoint_seminorm=seminorm,
                                  adjoint_method=adjoint_method)
                    objective, repeats = make_objective(solver), []
                    for _ in range(SPEED_REPEATS):
                        stats, start = SolverStats(), time.perf_counter()
                        objective(params, np.random.RandomState(0), stats)
                        repeats.append((time.perf_counter() - start, stats.forward.nfe,
                                        stats.backward.nfe))
                    seconds, nfe_forward, nfe_backward = min(repeats)
                    row = {"method": method, "adjoint_method": adjoint_method or method,
                           "tol": tol, "seminorm": seminorm, "seconds": round(seconds, 3),
                           "repeats": SPEED_REPEATS, "nfe_forward": nfe_forward,
                           "nfe_backward": nfe_backward}
                    if len({tuple(nfe) for _, *nfe in repeats}) > 1:
                        row["nfe_varied"] = [nfe for _, *nfe in repeats]
                    rows.append(row)
    return rows


def _fastest(rows):
    """How the rows' seconds were taken: records from before SPEED_REPEATS timed one gradient."""
    repeats = {r.get("repeats", 1) for r in rows}
    return ("the fastest of " + "/".join(map(str, sorted(repeats))) + " repeats"
            if repeats != {1} else "one timing each")


def solver_speed_block(rows, model):
    """The report's table of `measure_solvers` rows: one training gradient per solver setting."""
    if not rows:
        return ""
    varied = [f"{r['method']} / {r.get('adjoint_method', r['method'])} / {r['tol']:.1e} / "
              f"{'seminorm' if r['seminorm'] else 'full norm'}: "
              + ", ".join(f"{f} and {b}" for f, b in r["nfe_varied"])
              for r in rows if r.get("nfe_varied")]
    parts = [
        f"One training gradient of {model} per solver setting (seconds on the run's machine, "
        f"{_fastest(rows)}; NFE of the forward and the backward solves):",
        table(["method", "adjoint solved by", "tol", "seminorm", "seconds", "NFE fwd", "NFE bwd"],
              [[r["method"], r.get("adjoint_method", r["method"]), f"{r['tol']:.1e}",
                "yes" if r["seminorm"] else "no", r["seconds"], r["nfe_forward"],
                r["nfe_backward"]] for r in rows])]
    if varied:
        parts.append("Not deterministic: the same gradient's NFE (forward and backward) "
                     "differed between repeats, the table's are the fastest repeat's; "
                     + "; ".join(varied) + ".")
    return "\n\n".join(parts)
