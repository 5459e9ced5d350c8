"""The models of Table 2 as functions of parameter dicts: the latent ODE (recognition RNN,
MLP dynamics, decoder), the RNN and RNN + dt baselines that run free past their last
observation, two trivial baselines, their training objectives, and their scores."""
import autograd.numpy as anp
import numpy as np
from autograd import value_and_grad
from scipy.optimize import minimize

from odeint_autograd import odeint
from reproduce.latent import (MLPDynamics, encode, gaussian_log_density, init_gru, init_mlp,
                              init_rnn, kl_to_standard_normal, mlp, rnn_step, sample_z0,
                              solve_union, time_gaps)

from .data import SPIRAL, observed

RNN_MODELS = ("rnn", "rnn_dt")  # the baselines that run free past their last observation
# Table 2's latent ODE (LATENT_ODE: two-layer dynamics, a GRU recognition network, 6 random
# starts, and a warm restart of its schedule), its first stage (no warm restart), and the latent
# ODEs that led to it (none with a warm restart), each row naming what else it lacks: a tanh RNN
# encoder and 3 starts; the paper's one-layer dynamics and no restarts; the paper's window ELBO
LATENT_MODELS = ("latent_ode_extended", "latent_ode_gru", "latent_ode_2l", "latent_ode",
                 "latent_ode_elbo")
MODELS = RNN_MODELS + LATENT_MODELS
LATENT_ODE = "latent_ode_extended"  # Table 2's "Latent ODE": Figures 9 and 10, the inference gap
LABELS = {"rnn": "RNN", "rnn_dt": "RNN + dt", "latent_ode_extended": "Latent ODE",
          "latent_ode_gru": "Latent ODE, no warm restart",
          "latent_ode_2l": "Latent ODE, tanh RNN encoder, 3 starts",
          "latent_ode": "Latent ODE, one-layer dynamics, tanh RNN encoder, 1 start",
          "latent_ode_elbo": "Latent ODE, one-layer dynamics, tanh RNN encoder, 1 start, "
                             "window ELBO"}
MAP_LABEL = "{}, z0 by MAP"  # Table 2's row of a latent model scored from map_z0
TRUE_GAPS_LABEL = "RNN + dt, fed the true gaps"  # the RNN + dt scored by rnn_dt_at_times
LATENT, HIDDEN_RNN, HIDDEN_MLP = 4, 25, 20
# Every RNN (recognition and baselines) sees x / X_SCALE and time gaps in units of the grid step,
# so that its tanh units start unsaturated; the baselines' outputs are scaled back by X_SCALE.
X_SCALE, T_UNIT = 5.0, SPIRAL["stop"] / (SPIRAL["n_dense"] - 1)

# ---------------------------------------------------------------------------------------------
# Latent ODE


ENCODERS = {"rnn": init_rnn, "gru": init_gru}  # the recognition network's cell


def init_latent_ode(rng, dyn_hidden=HIDDEN_MLP, encoder="rnn"):
    """dyn_hidden: the dynamics' hidden width (the paper's one layer) or widths; encoder: the
    recognition network's cell, a vanilla RNN (the authors' public example) or a GRU."""
    return {"rec": ENCODERS[encoder](rng, 3, HIDDEN_RNN, 2 * LATENT),
            "dyn": init_mlp(rng, LATENT, dyn_hidden, LATENT),
            "dec": init_mlp(rng, LATENT, HIDDEN_MLP, 2)}


DYNAMICS = MLPDynamics("elu")


def posterior(params, xs, times, seen=None):
    """(mu, logvar) of q(z0 | x) from the recognition RNN (scaled inputs); seen (B, n): which
    observations it reads (all if None; the others leave its state unchanged)."""
    return encode(params["rec"], xs / X_SCALE, time_gaps(0.0, times) / T_UNIT, seen)


def elbo_terms(params, xs, times, eps, solver, noise_std=SPIRAL["noise_std"], stats=None,
               seen=None):
    """Per series: log p(x | z0) of every observation at the reparameterised sample z0 = mu +
    sigma eps, and KL(q(z0 | x_seen) || N(0, I)), q from the observations `seen` (all if None).
    The ELBO is their difference."""
    mu, logvar = posterior(params, xs, times, seen)
    z0 = sample_z0(mu, logvar, eps)
    zs = solve_union(DYNAMICS, z0, 0.0, times, args=(params["dyn"],), stats=stats, **solver)
    x_mean = mlp(params["dec"], zs, "relu")
    log_px = anp.sum(gaussian_log_density(xs, x_mean, np.log(noise_std)), axis=(1, 2))
    return log_px, kl_to_standard_normal(mu, logvar)


def decode(params, z0, t_grid, solver):
    """Decoded means (B, len(t_grid), 2) and latent paths (B, len(t_grid), LATENT) from z0 (B,
    LATENT) at t_grid[0]."""
    zs = anp.swapaxes(odeint(DYNAMICS, z0, t_grid, args=(params["dyn"],), **solver), 0, 1)
    return mlp(params["dec"], zs, "relu"), zs


def latent_ode_predict(params, xs, times, t_grid, solver, eps=None):
    """decode from z0 = the posterior mean (or the posterior sample mu + sigma eps)."""
    mu, logvar = posterior(params, xs, times)
    return decode(params, mu if eps is None else sample_z0(mu, logvar, eps), t_grid, solver)


def fit_z0(params, z_init, t_grid, index, target, solver, maxiter, noise_std=None, info=None):
    """The z0 (B, LATENT) whose decoded path at the times t_grid[index] (index (B, k)) fits
    target (B, k, 2) best: in least squares, or with noise_std the posterior mode under the
    model (the squared error / (2 noise_std^2) plus the prior's |z0|^2 / 2); L-BFGS from z_init
    for at most maxiter iterations, gradients by the adjoint. It tells what the trained dynamics
    and decoder can do when z0 is inferred as well as these points allow, whatever the
    recognition network does. info (a dict), if given, gets how L-BFGS stopped: whether its
    convergence test passed, its iterations and message, and the largest |gradient| entry
    (the objective is a sum over the spirals, so each spiral's is at most that)."""
    index = np.asarray(index)
    grid, rows = t_grid[:index.max() + 1], np.arange(len(index))[:, None]
    weight = 1.0 if noise_std is None else 0.5 / noise_std ** 2

    def objective(flat):
        z0 = anp.reshape(flat, z_init.shape)
        path = decode(params, z0, grid, solver)[0]
        misfit = weight * anp.sum((path[rows, index] - target) ** 2)
        return misfit if noise_std is None else misfit + 0.5 * anp.sum(z0 ** 2)

    loss_and_grad = value_and_grad(objective)

    def fun(flat):
        value, g = loss_and_grad(flat)
        return float(value), np.asarray(g, dtype=float)

    fit = minimize(fun, np.ravel(z_init).astype(float), jac=True, method="L-BFGS-B",
                   options={"maxiter": maxiter})
    if info is not None:
        info.update(converged=bool(fit.success), iterations=int(fit.nit), maxiter=maxiter,
                    message=str(fit.message), max_abs_gradient=float(np.max(np.abs(fit.jac))))
    return fit.x.reshape(np.shape(z_init))


def map_z0(params, data, n, rows, solver, maxiter, info=None):
    """The posterior mode of z0 of each given spiral from its n noisy observations (fit_z0 with
    the data noise, from the recognition network's mean): inference without the amortisation
    gap of the recognition network, from the same observations."""
    xs, times = observed(data, n, rows)
    mu = np.asarray(posterior(params, xs, times)[0])
    return fit_z0(params, mu, data["t"], data["obs_idx"][n][rows], xs, solver, maxiter,
                  noise_std=SPIRAL["noise_std"], info=info)


# ---------------------------------------------------------------------------------------------
# RNN baselines


def init_rnn_baseline(rng, with_dt):
    return init_rnn(rng, 2 + int(with_dt), HIDDEN_RNN, 4)  # read-out: mean (2), log-std (2)


def _rnn_input(x, gap, with_dt):
    x = x / X_SCALE
    return anp.concatenate([x, gap[:, None] / T_UNIT], axis=1) if with_dt else x


def _rnn_output(params, h):
    """The mean and log-std of the next observation, in data units."""
    out = anp.dot(h, params["Wo"]) + params["bo"]
    return X_SCALE * out[:, :2], out[:, 2:] + np.log(X_SCALE)


def rnn_nll(params, xs, times, with_dt):
    """Mean over series of the Gaussian negative log-likelihood of each next observation."""
    gaps = np.diff(times, axis=1)
    h = np.zeros((len(xs), HIDDEN_RNN))
    total = 0.0
    for i in range(xs.shape[1] - 1):
        h = rnn_step(params, h, _rnn_input(xs[:, i], gaps[:, i], with_dt))
        total = total - anp.sum(gaussian_log_density(xs[:, i + 1], *_rnn_output(params, h)))
    return total / len(xs)


def rnn_run(params, xs, gaps, n_free, with_dt):
    """Teacher-forced one-step predictions of observations 2..n (B, n-1, 2), then n_free
    free-running predictions (B, n_free, 2), each fed back as the next input. gaps (B, n - 1 +
    n_free): the time from each input to the prediction it makes (RNN + dt reads it)."""
    n = xs.shape[1]
    h = np.zeros((len(xs), HIDDEN_RNN))
    x, means = xs[:, 0], []
    for i in range(n - 1 + n_free):
        h = rnn_step(params, h, _rnn_input(x, gaps[:, i], with_dt))
        means.append(_rnn_output(params, h)[0])
        x = xs[:, i + 1] if i + 1 < n else means[-1]
    means = np.stack(means, axis=1)
    return means[:, :n - 1], means[:, n - 1:]


def rnn_predict(params, xs, times, t_future, with_dt, step):
    """One-step predictions of observations 2..n (B, n-1, 2) and the means at t_future
    (B, len(t_future), 2).

    After the last observation an RNN runs free, each prediction fed back as its next input.
    Its k-th free-running step is placed at t_last + k * step (step: the mean gap between the
    observations it was trained on; the RNN + dt is told that gap, the plain RNN never sees
    time), and its path, from the last observation on, is interpolated linearly onto t_future:
    stepping at the gaps it was trained on keeps the number of fed-back predictions (and their
    compounding error) that of its training sequences."""
    t_future = np.asarray(t_future, dtype=float)
    if step is None or not step > 0:
        raise ValueError(f"an RNN needs the positive time of one of its steps, not {step}")
    t_last = times[:, -1]
    n_free = int(np.ceil((t_future[-1] - t_last.min()) / step)) + 1
    gaps = np.concatenate([np.diff(times, axis=1), np.full((len(xs), n_free), step)], axis=1)
    recon, free = rnn_run(params, xs, gaps, n_free, with_dt)
    placed = t_last[:, None] + step * np.arange(n_free + 1)
    path = np.concatenate([xs[:, -1:], free], axis=1)
    at_future = np.stack([np.stack([np.interp(t_future, placed[b], path[b, :, c])
                                    for c in range(2)], axis=-1) for b in range(len(xs))])
    return recon, at_future


def rnn_dt_at_times(params, xs, times, t_future):
    """The RNN + dt's means at t_future (B, len(t_future), 2), running free from the last
    observation with the true gap to each next time as its input (t_future[0] - t_last, then
    t_future's own steps): no placing and no interpolation, but gaps unlike its training's."""
    t_future = np.asarray(t_future, dtype=float)
    ahead = np.concatenate([t_future[:1] - times[:, -1:],
                            np.broadcast_to(np.diff(t_future), (len(xs), len(t_future) - 1))],
                           axis=1)
    if not np.all(ahead > 0):
        raise ValueError("t_future must increase and start after every series' last observation")
    gaps = np.concatenate([np.diff(times, axis=1), ahead], axis=1)
    return rnn_run(params, xs, gaps, len(t_future), True)[1]


def mean_gap(times):
    """The mean time between consecutive observations (times (B, n), n >= 2)."""
    return float(np.mean(np.diff(times, axis=1)))


def last_observation(xs, t_future):
    """The trivial baseline: the last observation repeated at every future time."""
    return np.repeat(xs[:, -1:], len(t_future), axis=1)


def linear_extrapolation(xs, times, t_future, k=5):
    """A straight line fitted by least squares to each series' last k observations."""
    t, x = times[:, -k:], xs[:, -k:]
    tc = t - t.mean(1, keepdims=True)
    slope = (np.sum(tc[..., None] * (x - x.mean(1, keepdims=True)), axis=1)
             / np.sum(tc ** 2, axis=1)[:, None])
    return x.mean(1)[:, None] + slope[:, None] * (t_future[None, :, None]
                                                  - t.mean(1)[:, None, None])


# ---------------------------------------------------------------------------------------------
# Objectives for `train`


def encoder_sees(times, encode_cut, rng):
    """(B, n) mask of the observations before a cut drawn per series uniformly from
    [encode_cut, 1] of the observation window; the first observation is always seen."""
    cut = rng.uniform(encode_cut, 1.0, len(times)) * SPIRAL["window"] * T_UNIT
    seen = times <= cut[:, None]
    seen[:, 0] = True
    return seen


def latent_ode_objective(xs, times, solver, batch_size=None, encode_cut=None):
    """-ELBO per series of a minibatch of batch_size series (all of them if None), drawn from the
    model's generator, with one reparameterised sample each.

    encode_cut: None, the paper's objective (q(z0) reads every observation of the window); or a
    fraction c, so that each series' q(z0) reads only its observations up to a time drawn
    uniformly from [c, 1] of the window (the first one always), while the likelihood still
    scores them all: the model is trained to extrapolate what it has not read, as Table 2 asks
    of it."""
    def loss_and_grad(params, rng, stats):
        rows = (np.arange(len(xs)) if batch_size is None or batch_size >= len(xs)
                else np.sort(rng.choice(len(xs), batch_size, replace=False)))
        eps = rng.randn(len(rows), LATENT)
        seen = None if encode_cut is None else encoder_sees(times[rows], encode_cut, rng)

        def negative_elbo(p):
            log_px, kl = elbo_terms(p, xs[rows], times[rows], eps, solver, stats=stats,
                                    seen=seen)
            return -anp.mean(log_px - kl)

        return value_and_grad(negative_elbo)(params)

    return loss_and_grad


def rnn_objective(xs, times, with_dt):
    def loss_and_grad(params, rng, stats):
        return value_and_grad(rnn_nll)(params, xs, times, with_dt)

    return loss_and_grad


# ---------------------------------------------------------------------------------------------
# Evaluation


def rmse(pred, target):
    """Root of the mean squared difference over every entry of two arrays of the same shape;
    inf where a prediction is not finite (a diverged model scores worst, never NaN)."""
    pred, target = np.asarray(pred, dtype=float), np.asarray(target, dtype=float)
    if pred.shape != target.shape or pred.size == 0:
        raise ValueError(f"rmse needs predictions and targets of one non-empty shape, not "
                         f"{pred.shape} and {target.shape}")
    if not np.isfinite(target).all():
        raise ValueError("rmse: the targets hold non-finite values (a training series' "
                         "extrapolation part, which is never observed?)")
    if not np.isfinite(pred).all():
        return float("inf")
    return float(np.sqrt(np.mean((pred - target) ** 2)))


def predictions(model, params, data, n, rows, solver, step=None):
    """From the n noisy observations of the given spirals, one solve (or run) each: the model's
    predictions (B, extrap, 2) at the extrapolation times t_100..t_199, and its fit inside the
    observation window as (fit, the noise-free points it fits): the latent ODE's decoded path at
    every window time, an RNN's one-step predictions at observations 2..n; None for the trivial
    baselines."""
    w = SPIRAL["window"]
    xs, times = observed(data, n, rows)
    clean = data["clean"][rows, :w]
    if model in LATENT_MODELS:
        path = latent_ode_predict(params, xs, times, data["t"], solver)[0]
        return path[:, w:], (path[:, :w], clean)
    if model in RNN_MODELS:
        recon, future = rnn_predict(params, xs, times, data["t"][w:], model == "rnn_dt", step)
        at_obs = np.take_along_axis(clean, data["obs_idx"][n][rows][:, 1:, None], axis=1)
        return future, (recon, at_obs)
    if model == "last_observation":
        return last_observation(xs, data["t"][w:]), None
    if model == "linear":
        return linear_extrapolation(xs, times, data["t"][w:]), None
    raise ValueError(f"unknown model {model!r}")


def score_predictions(pred, data, rows):
    """RMSE of predictions (B, extrap, 2) at the extrapolation times of the given spirals against
    their noisy and their noise-free points (root of the mean over series, times and both
    coordinates)."""
    w = SPIRAL["window"]
    return {"rmse_noisy": rmse(pred, data["noisy"][rows, w:]),
            "rmse_clean": rmse(pred, data["clean"][rows, w:])}


def score(model, params, data, n, rows, solver, step=None):
    """score_predictions of one model's predictions from n observations."""
    return score_predictions(predictions(model, params, data, n, rows, solver, step)[0], data,
                             rows)


HORIZONS = 4  # the extrapolation scored in this many equal stretches of time


def rmse_by_horizon(pred, target, stretches=HORIZONS):
    """RMSE of predictions (B, T, 2) over each of `stretches` equal stretches of their T times."""
    return [rmse(p, t) for p, t in zip(np.array_split(pred, stretches, axis=1),
                                       np.array_split(target, stretches, axis=1))]


def extrapolation_scores(pred, window, data, rows):
    """score_predictions of predictions (B, extrap, 2), and the noise-free RMSE per direction
    (the two arms grow differently, the clockwise one as 1/angle), in HORIZONS stretches of the
    extrapolation and inside the observation window (window: (fit, the noise-free points it
    fits)), which tell an error that grows with the horizon from a poor fit."""
    result = score_predictions(pred, data, rows)
    result["rmse_clean_by_direction"] = {
        name: score_predictions(pred[data["direction"][rows] == d], data,
                                rows[data["direction"][rows] == d])["rmse_clean"]
        for name, d in (("counter-clockwise", 1), ("clockwise", -1))}
    result["rmse_clean_by_horizon"] = rmse_by_horizon(pred, data["clean"][rows, SPIRAL["window"]:])
    result["rmse_clean_window"] = rmse(*window)
    return result


def evaluate(model, params, data, n, solver, seed, step=None, refine=None):
    """Test-set extrapolation_scores (the RNN + dt's also fed the true gaps, under "true_gaps"),
    and the test ELBO (latent ODE) or NLL (RNNs) of the observations. refine: for a latent ODE,
    also the scores from z0 = map_z0 (under "map_z0"), with refine["solver"] for its gradients
    and at most refine["maxiter"] L-BFGS iterations."""
    rows, w = data["test"], SPIRAL["window"]
    pred, window = predictions(model, params, data, n, rows, solver, step)
    result = extrapolation_scores(pred, window, data, rows)
    xs, times = observed(data, n, rows)
    if model == "rnn_dt":  # also fed the true gaps (the same window fit: teacher forced)
        result["true_gaps"] = extrapolation_scores(
            rnn_dt_at_times(params, xs, times, data["t"][w:]), window, data, rows)
    if model in LATENT_MODELS:
        eps = np.random.RandomState(seed).randn(len(rows), LATENT)
        log_px, kl = elbo_terms(params, xs, times, eps, solver)
        result["test_elbo"] = float(np.mean(log_px - kl))
        if refine is not None:
            lbfgs = {}
            z0 = map_z0(params, data, n, rows, refine["solver"], refine["maxiter"], lbfgs)
            path = decode(params, z0, data["t"], solver)[0]
            result["map_z0"] = extrapolation_scores(
                path[:, w:], (path[:, :w], data["clean"][rows, :w]), data, rows)
            result["map_z0"]["lbfgs"] = lbfgs
    elif model in RNN_MODELS:
        result["test_nll"] = float(rnn_nll(params, xs, times, model == "rnn_dt"))
    return result


def decoded_direction(xy):
    """+1 if a 2-D path turns counter-clockwise around its centroid on average, -1 if clockwise
    (the sign of the mean angular velocity, the cross product of position and velocity)."""
    p = xy - xy.mean(axis=0)
    v = np.diff(xy, axis=0)
    return int(np.sign(np.mean(p[:-1, 0] * v[:, 1] - p[:-1, 1] * v[:, 0])))
