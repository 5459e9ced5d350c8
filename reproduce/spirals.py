"""Table 2, Figures 9 and 10 of the paper (Section 5.1): a latent ODE against two RNNs on
irregularly sampled bi-directional spirals.

    python -m reproduce spirals --quick     # all of Table 2 at reduced data and iterations
    python -m reproduce spirals --full      # 1000 spirals, the full number of iterations

Data (the paper gives only "1000 2-D spirals, each starting at a different point, 100 equally
spaced steps, half clockwise and half counter-clockwise, Gaussian noise"; the rest follows the
authors' later public example, see CHOICES): each spiral is a window of 200 consecutive points of
a dense Archimedean arm; its first 100 points are the observation window, from which n = 30, 50
or 100 are sampled without replacement, and the 100 following are the extrapolation targets.

Models (paper): a latent ODE trained as a VAE (recognition RNN with 25 hidden units reading the
observations backwards with their time gaps, 4-d latent, dynamics and decoder with one hidden
layer of 20 units); an RNN with 25 hidden units trained by Gaussian negative log-likelihood to
predict the next observation; the same RNN with the time gap to the next observation as an extra
input. Table 2: RMSE of each model's predictions at the 100 extrapolation times of the test set.
"""
import autograd.numpy as anp
import numpy as np
from autograd import value_and_grad

from odeint_autograd import odeint
from reproduce.common import Run, StopAfter, partial_note
from reproduce.latent import (PAPER_TOL, MLPDynamics, add_run_args, encode,
                              gaussian_log_density, init_mlp, init_rnn, kl_to_standard_normal,
                              measure_solvers, mlp, rnn_step, sample_z0, solve_union,
                              solver_from_args, time_gaps, train, training_summary)

N_OBS = (30, 50, 100)
MODELS = ("rnn", "rnn_dt", "latent_ode")
LABELS = {"rnn": "RNN", "rnn_dt": "RNN + dt", "latent_ode": "Latent ODE"}
DATA_SEED = 0  # the data and the train/test split are fixed; --seed changes the training only

# The spiral family of the authors' public example (torchdiffeq/examples/latent_ode.py).
SPIRAL = dict(n_dense=1000, stop=6 * np.pi, a=0.0, b=0.3, noise_std=0.3, window=100, extrap=100)
LATENT, HIDDEN_RNN, HIDDEN_MLP = 4, 25, 20
# Every RNN (recognition and baselines) sees x / X_SCALE and time gaps in units of the grid step,
# so that its tanh units start unsaturated; the baselines' outputs are scaled back by X_SCALE.
X_SCALE, T_UNIT = 5.0, SPIRAL["stop"] / (SPIRAL["n_dense"] - 1)

CHOICES = {
    "spirals": "Archimedean arms of the authors' public example: a dense time grid s of "
               f"{SPIRAL['n_dense']} points on [0, 6 pi]; clockwise r = a + 50 b / (6 pi + 1 - s) "
               "at angle 6 pi + 1 - s centred at (-5, 0); counter-clockwise r = a + b s at angle "
               f"s centred at (5, 0); a = {SPIRAL['a']:g}, b = {SPIRAL['b']:g}",
    "directions": "exactly half of each of the training, validation and test sets clockwise, "
                  "half counter-clockwise",
    "starting points": f"a validation or test spiral is {SPIRAL['window'] + SPIRAL['extrap']} "
                       "consecutive points of its arm, starting at an index drawn from "
                       f"0..{SPIRAL['n_dense'] - SPIRAL['window'] - SPIRAL['extrap']}; a training "
                       f"spiral is observed only on its first {SPIRAL['window']} points and "
                       f"starts at 0..{SPIRAL['n_dense'] - SPIRAL['window']}, so that the training "
                       "windows cover the whole arm, every test extrapolation point included "
                       "(with training starts limited to the test range, the arm's last 100 "
                       "points, where 3-8% of the test extrapolation points lie, would be seen "
                       "by no training series); no two spirals of a direction start at the same "
                       "point",
    "time": "series time t_j = j * 6 pi / 999 (the dense grid's step), t_0 = 0 at the window's "
            f"first point; observation window t_0..t_{SPIRAL['window'] - 1}, extrapolation "
            f"t_{SPIRAL['window']}..t_{SPIRAL['window'] + SPIRAL['extrap'] - 1}",
    "noise": f"i.i.d. Gaussian noise, std {SPIRAL['noise_std']:g} (the public example), on every "
             "point",
    "irregular sampling": "n of the window's points drawn without replacement per spiral, "
                          "independently for each n, then sorted",
    "split": "10% of the spirals for test and 10% for validation, the rest for training (fixed "
             "data seed 0); the seeds change initialisation and training noise only",
    "RMSE": "root of the mean squared error over test spirals, the extrapolation times and both "
            "coordinates, against the noise-free points (Table 2's published numbers can only "
            "be noise-free ones: against the noisy points no model scores below about the noise "
            "std); against the noisy points beside it",
    "model selection": "each model's parameters at the validation check (every validate_every "
                       "iterations) with the lowest validation RMSE against the noisy points "
                       "(what an experimenter can measure); the last iterate's test RMSE is kept "
                       "in the results too",
    "latent ODE": "recognition RNN tanh, 25 hidden, input [x_i, t_i - t_(i-1)] read from the "
                  "last observation back to the first (t_0 = 0 before the first), linear "
                  "read-out to mean and log-variance of q(z0); latent 4; dynamics 4-20-4 ELU "
                  "(the paper's one hidden layer; the public example has two); decoder 4-20-2 "
                  "ReLU; Gaussian likelihood with fixed std 0.3 (the data noise, as in the "
                  "public example); prior N(0, I); ELBO with one reparameterised sample per "
                  "series and the KL in closed form; predictions from z0 = the posterior mean, "
                  "solved over t_0..t_199 and decoded (Figure 9(b) decodes a posterior sample, "
                  "as the paper's caption says)",
    "RNN baselines": "vanilla tanh RNN, 25 hidden, reading the observations forwards, linear "
                     "read-out to the mean and log-std of a Gaussian over the next observation, "
                     "trained by its negative log-likelihood (teacher forcing); RNN + dt also "
                     "gets the gap t_(i+1) - t_i to the observation it predicts. Extrapolation: "
                     "after the last observation each RNN runs free, its predictions fed back, "
                     "its k-th step placed at t_last + k g (g: the mean gap between its training "
                     "observations, 100/n grid steps; the RNN + dt is told g), and its path from "
                     "the last observation on is interpolated linearly onto the extrapolation "
                     "times. The paper reports one RNN row: it is compared with the RNN + dt, "
                     "the version the paper built for irregular observations",
    "baselines": "Last observation: the last observed (noisy) point repeated at every "
                 "extrapolation time; Linear extrapolation: a least-squares line through the "
                 "last 5 observations against time",
    "input scaling": "every RNN (the recognition RNN and both baselines) reads x / 5 and time "
                     "gaps in units of the grid step 6 pi / 999; the baselines' predicted means "
                     "and standard deviations are scaled back by 5 (the latent ODE's decoder "
                     "works in data units, as in the public example)",
    "union of times": "the latent ODE solves each batch once on the sorted union of its "
                      "spirals' observation times and gathers each spiral's own rows",
}


# ---------------------------------------------------------------------------------------------
# Data


def spiral_arms(n_dense=SPIRAL["n_dense"], stop=SPIRAL["stop"], a=SPIRAL["a"], b=SPIRAL["b"]):
    """The dense time grid s and the clockwise and counter-clockwise arms, each (n_dense, 2)."""
    s = np.linspace(0.0, stop, n_dense)
    theta_cw = stop + 1.0 - s  # decreasing angle: clockwise
    r_cw = a + 50.0 * b / theta_cw
    cw = np.stack([r_cw * np.cos(theta_cw) - 5.0, r_cw * np.sin(theta_cw)], axis=1)
    r_ccw = a + b * s
    ccw = np.stack([r_ccw * np.cos(s) + 5.0, r_ccw * np.sin(s)], axis=1)
    return s, cw, ccw


def generate_spirals(rng, roles, noise_std=SPIRAL["noise_std"], window=SPIRAL["window"],
                     extrap=SPIRAL["extrap"], n_dense=SPIRAL["n_dense"]):
    """One spiral per entry of `roles` ("train", "val" or "test"), half of each role clockwise and
    half counter-clockwise, every start point different within a direction.

    A validation or test spiral is window + extrap points of its arm (start index 0..n_dense -
    window - extrap); a training spiral only needs its observation window, and its start index
    ranges over 0..n_dense - window, so that the training windows cover the whole arm, the part
    where the test series are extrapolated included; its extrapolation part is NaN (never used).
    Returns dict t (L,), clean and noisy (S, L, 2), direction (S,) with +1 for counter-clockwise
    and -1 for clockwise, start (S,) index on the dense arm, role (S,)."""
    roles = np.asarray(roles)
    length = window + extrap
    s, cw, ccw = spiral_arms(n_dense)
    direction = np.zeros(len(roles), dtype=int)
    for role in ("train", "val", "test"):
        rows = np.flatnonzero(roles == role)
        if len(rows) % 2:
            raise ValueError(f"the {role} set needs an even number of spirals, not {len(rows)}")
        direction[rows] = rng.permutation(np.repeat([1, -1], len(rows) // 2))
    start = np.empty(len(roles), dtype=int)
    for d in (1, -1):
        held = np.flatnonzero((direction == d) & (roles != "train"))
        train = np.flatnonzero((direction == d) & (roles == "train"))
        if len(held) > n_dense - length + 1 or len(held) + len(train) > n_dense - window + 1:
            raise ValueError(f"{len(held) + len(train)} spirals of one direction cannot all "
                             f"start at different points of a {n_dense}-point arm")
        start[held] = rng.choice(n_dense - length + 1, size=len(held), replace=False)
        free = np.setdiff1d(np.arange(n_dense - window + 1), start[held])
        start[train] = rng.choice(free, size=len(train), replace=False)
    steps = start[:, None] + np.arange(length)
    inside = steps < n_dense
    steps = np.minimum(steps, n_dense - 1)
    clean = np.where((direction == 1)[:, None, None], ccw[steps], cw[steps])
    clean[~inside] = np.nan
    noisy = clean + noise_std * rng.randn(*clean.shape)
    return {"t": s[:length] - s[0], "clean": clean, "noisy": noisy, "direction": direction,
            "start": start, "role": roles}


def subsample(rng, n_series, n_obs, window=SPIRAL["window"]):
    """(n_series, n_obs) sorted indices into the window, drawn without replacement per series."""
    if not 1 <= n_obs <= window:
        raise ValueError(f"n_obs must lie in 1..{window}, not {n_obs}")
    return np.stack([np.sort(rng.choice(window, n_obs, replace=False)) for _ in range(n_series)])


def make_roles(n_spirals, held_out_fraction=0.1):
    """"test" and "val" for held_out_fraction of the spirals each (an even number), "train" for
    the rest."""
    n_held = 2 * max(1, int(round(held_out_fraction * n_spirals / 2)))
    if n_spirals < 2 * n_held + 2:
        raise ValueError(f"{n_spirals} spirals are too few for a train, validation and test set")
    return np.array(["test"] * n_held + ["val"] * n_held + ["train"] * (n_spirals - 2 * n_held))


def make_dataset(n_spirals, seed=DATA_SEED):
    """The spirals, their roles and the irregular samples for every n, from one fixed seed."""
    rng = np.random.RandomState(seed)
    data = generate_spirals(rng, rng.permutation(make_roles(n_spirals)))
    for role in ("train", "val", "test"):
        data[role] = np.flatnonzero(data["role"] == role)
    data["obs_idx"] = {n: subsample(rng, n_spirals, n) for n in N_OBS}
    return data


def observed(data, n, rows):
    """The noisy observations (B, n, 2) and their times (B, n) of the given spirals."""
    idx = data["obs_idx"][n][rows]
    return data["noisy"][rows[:, None], idx], data["t"][idx]


# ---------------------------------------------------------------------------------------------
# Latent ODE


def init_latent_ode(rng):
    return {"rec": init_rnn(rng, 3, HIDDEN_RNN, 2 * LATENT),
            "dyn": init_mlp(rng, LATENT, HIDDEN_MLP, LATENT),
            "dec": init_mlp(rng, LATENT, HIDDEN_MLP, 2)}


DYNAMICS = MLPDynamics("elu")


def posterior(params, xs, times):
    """(mu, logvar) of q(z0 | x) from the recognition RNN (scaled inputs)."""
    return encode(params["rec"], xs / X_SCALE, time_gaps(0.0, times) / T_UNIT)


def elbo_terms(params, xs, times, eps, solver, noise_std=SPIRAL["noise_std"], stats=None):
    """Per series: log p(x | z0) at the reparameterised sample z0 = mu + sigma eps, and
    KL(q(z0 | x) || N(0, I)). The ELBO is their difference."""
    mu, logvar = posterior(params, xs, times)
    z0 = sample_z0(mu, logvar, eps)
    zs = solve_union(DYNAMICS, z0, 0.0, times, args=(params["dyn"],), stats=stats, **solver)
    x_mean = mlp(params["dec"], zs, "relu")
    log_px = anp.sum(gaussian_log_density(xs, x_mean, np.log(noise_std)), axis=(1, 2))
    return log_px, kl_to_standard_normal(mu, logvar)


def latent_ode_predict(params, xs, times, t_grid, solver, eps=None):
    """Decoded means (B, len(t_grid), 2) and latent paths (B, len(t_grid), LATENT) from z0 =
    the posterior mean (or the posterior sample mu + sigma eps)."""
    mu, logvar = posterior(params, xs, times)
    z0 = mu if eps is None else sample_z0(mu, logvar, eps)
    zs = np.swapaxes(odeint(DYNAMICS, z0, t_grid, args=(params["dyn"],), **solver), 0, 1)
    return mlp(params["dec"], zs, "relu"), zs


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


def latent_ode_objective(xs, times, solver, batch_size=None):
    """-ELBO per series of a minibatch of batch_size series (all of them if None), drawn from the
    model's generator, with one reparameterised sample each."""
    def loss_and_grad(params, rng, stats):
        rows = (np.arange(len(xs)) if batch_size is None or batch_size >= len(xs)
                else np.sort(rng.choice(len(xs), batch_size, replace=False)))
        eps = rng.randn(len(rows), LATENT)

        def negative_elbo(p):
            log_px, kl = elbo_terms(p, xs[rows], times[rows], eps, solver, stats=stats)
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
    return float(np.sqrt(np.mean((pred - target) ** 2)))


def predict(model, params, data, n, rows, solver, step=None):
    """Each model's predictions (B, extrap, 2) at the extrapolation times t_100..t_199 of the
    given spirals, from their n noisy observations."""
    w = SPIRAL["window"]
    xs, times = observed(data, n, rows)
    if model == "latent_ode":
        return latent_ode_predict(params, xs, times, data["t"], solver)[0][:, w:]
    if model in ("rnn", "rnn_dt"):
        return rnn_predict(params, xs, times, data["t"][w:], model == "rnn_dt", step)[1]
    if model == "last_observation":
        return last_observation(xs, data["t"][w:])
    if model == "linear":
        return linear_extrapolation(xs, times, data["t"][w:])
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
    return score_predictions(predict(model, params, data, n, rows, solver, step), data, rows)


def evaluate(model, params, data, n, solver, seed, step=None):
    """Test-set RMSE (noisy and noise-free) and the test ELBO (latent ODE) or NLL (RNNs) of the
    observations."""
    rows = data["test"]
    result = score(model, params, data, n, rows, solver, step)
    xs, times = observed(data, n, rows)
    if model == "latent_ode":
        eps = np.random.RandomState(seed).randn(len(rows), LATENT)
        log_px, kl = elbo_terms(params, xs, times, eps, solver)
        result["test_elbo"] = float(np.mean(log_px - kl))
    elif model in ("rnn", "rnn_dt"):
        result["test_nll"] = float(rnn_nll(params, xs, times, model == "rnn_dt"))
    return result


def decoded_direction(xy):
    """+1 if a 2-D path turns counter-clockwise around its centroid on average, -1 if clockwise
    (the sign of the mean angular velocity, the cross product of position and velocity)."""
    p = xy - xy.mean(axis=0)
    v = np.diff(xy, axis=0)
    return int(np.sign(np.mean(p[:-1, 0] * v[:, 1] - p[:-1, 1] * v[:, 0])))


# ---------------------------------------------------------------------------------------------
# Figures


def figure_9(path, data, models, solver, seed, n=30, step=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    test = data["test"]
    picks = np.array([test[data["direction"][test] == d][0] for d in (-1, 1)])
    xs, times = observed(data, n, picks)
    w = SPIRAL["window"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    rnn_recon, rnn_extrap = rnn_predict(models["rnn_dt"], xs, times, data["t"][w:], True, step)
    eps = np.random.RandomState(seed).randn(len(picks), LATENT)
    ode_path, _ = latent_ode_predict(models["latent_ode"], xs, times, data["t"], solver, eps)
    for ax, title, recon, extrap in (
            (axes[0], "(a) RNN + dt", rnn_recon, rnn_extrap),
            (axes[1], "(b) Latent ODE", ode_path[:, :w], ode_path[:, w:])):
        for k in range(len(picks)):
            first = k == 0
            ax.plot(*data["clean"][picks[k]].T, color="0.6", lw=1, ls="--",
                    label="ground truth" if first else None)
            ax.scatter(*xs[k].T, s=10, color="k", zorder=3,
                       label=f"{n} observations" if first else None)
            ax.plot(*recon[k].T, color="tab:blue", lw=1.5,
                    label="reconstruction" if first else None)
            ax.plot(*extrap[k].T, color="tab:red", lw=1.5, label="extrapolation" if first else None)
        ax.set_title(title)
        ax.set_xlabel("$x_1$")
        ax.set_ylabel("$x_2$")
        ax.set_aspect("equal", adjustable="datalim")
        ax.legend(fontsize=8, loc="upper left")
    xs_all, times_all = observed(data, n, test)
    _, zs = latent_ode_predict(models["latent_ode"], xs_all, times_all, data["t"], solver)
    for d, colour, label in ((-1, "tab:blue", "clockwise"), (1, "tab:red", "counter-clockwise")):
        rows = np.flatnonzero(data["direction"][test] == d)
        for j, r in enumerate(rows):
            axes[2].plot(zs[r, :, 0], zs[r, :, 1], color=colour, lw=0.6, alpha=0.6,
                         label=label if j == 0 else None)
    axes[2].set_title("(c) Latent trajectories (test set)")
    axes[2].set_xlabel("$z_1$")
    axes[2].set_ylabel("$z_2$")
    axes[2].legend(fontsize=8)
    fig.suptitle(f"Figure 9: spirals with {n} irregular observations (reproduction)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def figure_10(path, data, params, solver, n=30, n_panels=6):
    """Decode z0 = the mean of the test posteriors with the dimension that best separates the
    two directions swept across the range of the test posterior means. Returns what it drew."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    test = data["test"]
    xs, times = observed(data, n, test)
    mu, logvar = posterior(params, xs, times)
    direction = data["direction"][test]
    sep = np.abs(mu[direction == 1].mean(0) - mu[direction == -1].mean(0)) / mu.std(0)
    dim = int(np.argmax(sep))
    values = np.linspace(mu[:, dim].min(), mu[:, dim].max(), n_panels)
    z0 = np.repeat(mu.mean(0, keepdims=True), n_panels, axis=0)
    z0[:, dim] = values
    zs = np.swapaxes(odeint(DYNAMICS, z0, data["t"], args=(params["dyn"],), **solver), 0, 1)
    paths = mlp(params["dec"], zs, "relu")
    turns = [decoded_direction(p) for p in paths]
    fig, axes = plt.subplots(1, n_panels, figsize=(2.6 * n_panels, 3.3), layout="constrained")
    for ax, p, v, turn in zip(axes, paths, values, turns):
        sc = ax.scatter(*p.T, c=data["t"], cmap="rainbow", s=4)
        ax.set_title(f"$z_{dim + 1}(t_0)$ = {v:.2f}\n({'CCW' if turn > 0 else 'CW'})", fontsize=9)
        ax.set_xlabel("$x_1$")
        ax.set_aspect("equal", adjustable="datalim")
    axes[0].set_ylabel("$x_2$")
    fig.colorbar(sc, ax=axes, label="t", fraction=0.02)
    fig.suptitle(f"Figure 10: decoded trajectories while $z_{dim + 1}(t_0)$ varies "
                 f"(reproduction)")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return {"dimension": dim + 1, "values": values, "direction": turns,
            "separation_by_dimension": sep}


def figure_training(path, histories):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for ax, model in zip(axes, MODELS):
        for n in N_OBS:
            ax.plot(histories[model][n]["loss"], label=f"n = {n}")
        ax.set_title(LABELS[model])
        ax.set_xlabel("iteration")
        ax.set_ylabel("-ELBO per series" if model == "latent_ode" else "NLL per series")
        ax.set_yscale("symlog")
        ax.legend(fontsize=8)
    fig.suptitle("Training losses (Table 2 models)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------


def add_args(parser):
    add_run_args(parser)
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="training seeds, each a separate model (default: --seed in "
                             "--smoke/--quick, 0 1 2 in --full)")
    parser.add_argument("--train-only-n", type=int, nargs="+", choices=N_OBS, default=None,
                        help="train (or, with --resume, continue) only the models for these "
                             "numbers of observed points and stop: several such runs can share "
                             "the cores; a later --resume run without it then only evaluates")
    parser.add_argument("--train-only", nargs="+", choices=MODELS, default=None,
                        help="train only these models and stop (as --train-only-n)")


# What each mode trains. Per model: iterations, Adam's learning rate decaying exponentially to
# lr_final, the cap on the gradient's global norm, and the minibatch (None: all training series).
# The caps sit above the gradient norms of steady training (measured: RNNs 25-400 per series,
# the latent ODE 300-900), so that they cut only the spikes.
TRAINING = {
    "rnn": dict(lr=1e-2, lr_final=1e-4, clip=100.0, batch_size=None),
    "rnn_dt": dict(lr=1e-2, lr_final=1e-4, clip=100.0, batch_size=None),
    "latent_ode": dict(lr=1e-2, lr_final=1e-4, clip=1000.0, batch_size=100),
}
SETTINGS = {
    "smoke": dict(n_spirals=40, iters={"rnn": 5, "rnn_dt": 5, "latent_ode": 5}, tol=1e-5,
                  ckpt_every=2, validate_every=2),
    "quick": dict(n_spirals=200, iters={"rnn": 500, "rnn_dt": 500, "latent_ode": 1000},
                  tol=1e-5, ckpt_every=50, validate_every=50),
    "full": dict(n_spirals=1000, iters={"rnn": 3000, "rnn_dt": 3000, "latent_ode": 20000},
                 tol=1e-5, ckpt_every=250, validate_every=250),
}
ADJOINT_METHOD = "dopri5"  # the backward solve: its step size carries across output times


def train_unit(run, cfg, data, solver, model, n, seed, stopper):
    """Train one model for one n and one seed (resumable); returns its state, state["best"]
    holding the parameters with the lowest validation RMSE (against the noisy points)."""
    xs, times = observed(data, n, data["train"])
    hyper = TRAINING[model]
    step = mean_gap(times)
    if model == "latent_ode":
        init = init_latent_ode
        objective = latent_ode_objective(xs, times, solver, hyper["batch_size"])
    else:
        init = lambda rng, d=model == "rnn_dt": init_rnn_baseline(rng, d)  # noqa: E731
        objective = rnn_objective(xs, times, model == "rnn_dt")

    def validate(params):
        return score(model, params, data, n, data["val"], solver, step)["rmse_noisy"]

    return train(run, f"{model}_n{n}_seed{seed}", init, objective, cfg["iters"][model],
                 hyper["lr"], stopper, cfg["ckpt_every"], seed=seed, lr_final=hyper["lr_final"],
                 clip=hyper["clip"], validate=validate, validate_every=cfg["validate_every"],
                 config={"batch_size": hyper["batch_size"], "n_spirals": cfg["n_spirals"]})


def _summary(values):
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def main(argv=None):
    run = Run("spirals", argv, description=__doc__.split("\n\n")[0], extra_args=add_args,
              bookkeeping={"seeds", "train_only"})
    cfg = run.pick(**SETTINGS)
    seeds = run.args.seeds or run.pick([run.seed], [run.seed], [0, 1, 2])
    if len(set(seeds)) != len(seeds):
        run.usage_error(f"--seeds repeats a seed: {seeds}")
    solver, solver_text = solver_from_args(run.args, cfg["tol"])
    solver["adjoint_method"] = ADJOINT_METHOD
    eval_solver = dict(solver, rtol=PAPER_TOL, atol=PAPER_TOL)
    data = make_dataset(cfg["n_spirals"])
    stopper = StopAfter(run.args.stop_after)
    models = run.args.train_only or MODELS
    states, per_seed = {}, {}
    for n in run.args.train_only_n or N_OBS:
        step = mean_gap(observed(data, n, data["train"])[1])
        for model in models:
            for seed in seeds:
                state = train_unit(run, cfg, data, solver, model, n, seed, stopper)
                states[model, n, seed] = state
                best = state["best"]["params"] if state["best"] else state["params"]
                result = evaluate(model, best, data, n, eval_solver, seed + 1, step)
                result["best_step"] = state["best"]["step"] if state["best"] else None
                result["last_iterate"] = score(model, state["params"], data, n, data["test"],
                                               eval_solver, step)
                per_seed[model, n, seed] = result
                print(f"spirals: {LABELS[model]:10s} n = {n:3d} seed {seed}: " + ", ".join(
                    f"{k} {v:.4f}" for k, v in result.items() if isinstance(v, float)),
                    flush=True)
    if run.args.train_only_n or run.args.train_only:
        print(f"spirals: trained {sorted({k[:2] for k in states})}; checkpoints in "
              f"{run.ckpt_dir}")
        return 0

    table = {}
    for model in MODELS:
        for n in N_OBS:
            rows = [per_seed[model, n, s] for s in seeds]
            entry = {"seeds": seeds}
            for key in ("rmse_clean", "rmse_noisy"):
                values = [r[key] for r in rows]
                entry[key], entry[f"{key}_sd"] = _summary(values)
                entry[f"{key}_seeds"] = values
            for key in ("test_elbo", "test_nll", "best_step"):
                if key in rows[0]:
                    entry[f"{key}_seeds"] = [r[key] for r in rows]
            entry["last_iterate_rmse_clean_seeds"] = [r["last_iterate"]["rmse_clean"]
                                                      for r in rows]
            table.setdefault(LABELS[model], {})[str(n)] = entry
    for model, label in (("last_observation", "Last observation"),
                         ("linear", "Linear extrapolation")):
        for n in N_OBS:
            r = score(model, None, data, n, data["test"], eval_solver)
            table.setdefault(label, {})[str(n)] = {
                "rmse_clean": r["rmse_clean"], "rmse_clean_sd": 0.0,
                "rmse_clean_seeds": [r["rmse_clean"]], "rmse_noisy": r["rmse_noisy"],
                "rmse_noisy_sd": 0.0, "rmse_noisy_seeds": [r["rmse_noisy"]]}

    s0 = seeds[0]
    best = {(m, n): (states[m, n, s0]["best"] or states[m, n, s0])["params"]
            for m in MODELS for n in N_OBS}
    histories = {m: {n: states[m, n, s0]["history"] for n in N_OBS} for m in MODELS}
    step30 = mean_gap(observed(data, 30, data["train"])[1])
    figure_9(run.path("fig9.png"), data, {m: best[m, 30] for m in MODELS}, eval_solver,
             s0 + 2, step=step30)
    fig10 = figure_10(run.path("fig10.png"), data, best["latent_ode", 30], eval_solver)
    figure_training(run.path("training.png"), histories)

    params30 = best["latent_ode", 30]
    xs30, times30 = observed(data, 30, data["train"][:TRAINING["latent_ode"]["batch_size"]
                                                     or len(data["train"])])
    speed = measure_solvers(lambda sv: latent_ode_objective(xs30, times30, sv), params30,
                            sorted({solver["rtol"], PAPER_TOL}))
    tolerance_effect = [dict(tol=t, **evaluate("latent_ode", params30, data, 30,
                                               dict(solver, rtol=t, atol=t), s0 + 1))
                        for t in (PAPER_TOL, 1e-6, 1e-5, 1e-4)]

    timing = {f"{m}_n{n}_seed{s}": training_summary(states[m, n, s])
              for m in MODELS for n in N_OBS for s in seeds}
    choices = dict(CHOICES)
    choices.update({
        "data size": f"{cfg['n_spirals']} spirals: {len(data['train'])} train, "
                     f"{len(data['val'])} validation, {len(data['test'])} test",
        "iterations": cfg["iters"],
        "training": {m: dict(TRAINING[m], iterations=cfg["iters"][m]) for m in MODELS},
        "seeds": f"{len(seeds)} training seeds ({', '.join(map(str, seeds))}): Table 2 shows "
                 "the mean and the sample standard deviation over them",
        "solver": solver_text + f"; the adjoint solved by {ADJOINT_METHOD}; every test number "
                                f"evaluated at the paper's {PAPER_TOL:g}",
        "solver measurements": "solver_speed_latent_ode_n30: seconds and NFE of one training "
                               "gradient of the trained n = 30 latent ODE (one minibatch) per "
                               "method, tolerance and adjoint norm; "
                               "tolerance_effect_latent_ode_n30: its test RMSE and ELBO (same "
                               "noise) evaluated at each tolerance",
    })
    note = partial_note({f"{m}_n{n}_seed{s}": (states[m, n, s]["step"], cfg["iters"][m])
                         for m in MODELS for n in N_OBS for s in seeds})
    run.save_results({
        **({"note": note} if note else {}),
        "table2_rmse": table,
        "figure10": fig10,
        "training": timing,
        "solver": solver,
        "solver_speed_latent_ode_n30": speed,
        "tolerance_effect_latent_ode_n30": tolerance_effect,
    }, choices=choices)
    print(f"spirals: wrote {run.out_dir}", flush=True)
    return 0
