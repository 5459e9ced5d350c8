"""Figure 8 of the paper (Section 5): a latent ODE with a Poisson process likelihood.

    python -m reproduce poisson --quick

Event times come from inhomogeneous Poisson processes with known intensities (simulated by
thinning). The model is a latent ODE fitted by variational inference: each sequence k has its own
Gaussian q(z0_k) (its mean and standard deviation are parameters, fitted with the shared ones);
the latent state follows dz/dt = f(z); the intensity is lambda(z(t)) = exp(g(z(t))) with g a small
network; and

    log p(t_1..t_N | t_start, t_end) = sum_i log lambda(z(t_i)) - int_{t_start}^{t_end} lambda dt

comes out of ONE odeint call whose state is [z, Lambda] with dLambda/dt = lambda(z): the solve
returns z at every event time and Lambda(t_end), the integral. The figure puts the learned
intensity beside the true one (which the model never sees) and their difference, over the
observation window and extrapolated a quarter of it beyond.
"""
import autograd.numpy as anp
import numpy as np
from autograd import value_and_grad

from odeint_autograd import odeint
from reproduce.common import Run, StopAfter, partial_note
from reproduce.latent import (PAPER_TOL, add_run_args, init_mlp, kl_to_standard_normal,
                              measure_solvers, mlp, mlp_vjp, sample_z0, solve_union,
                              solver_from_args, train, training_summary)

LATENT, HIDDEN_MLP = 4, 20
DATA_SEED = 0
# True intensities: lambda(t) = exp(log_base + r cos(2 pi t / period + phi)), the read-out of a
# 2-d rotating latent state, so that a latent ODE can represent it exactly.
TRUE = dict(t_end=10.0, log_base=np.log(2.0), period=5.0, r_range=(0.5, 1.5))

CHOICES = {
    "true intensity": "lambda(t) = exp(log 2 + r cos(2 pi t / 5 + phi)) on [0, 10], r ~ U(0.5, "
                      "1.5) and phi ~ U(0, 2 pi) per sequence (the paper does not give its toy "
                      "data); about 25 events per sequence",
    "simulation": "thinning (Lewis and Shedler): a homogeneous process at rate max lambda, each "
                  "event kept with probability lambda(t) / max lambda",
    "model": "latent 4; dynamics 4-20-4 ELU; intensity lambda(z) = exp(g(z)), g 4-20-1 ELU; "
             "prior N(0, I) on z0; q(z0_k) = N(m_k, diag(s_k^2)) with m_k, log s_k free "
             "parameters per sequence (non-amortised: a recognition RNN reading event times, "
             "tried first, stayed at the constant-rate solution for 600 iterations in a quick "
             "exploration, while this form learned the oscillation); ELBO with one "
             "reparameterised sample per sequence and the KL in closed form",
    "likelihood": "sum_i log lambda(z(t_i)) - Lambda(t_end), with Lambda an extra state of the "
                  "same odeint call (dLambda/dt = lambda(z), Lambda(0) = 0); all sequences are "
                  "solved in one call on the union of their event times",
    "training": "Adam, learning rate 0.01, all sequences every iteration, init "
                "U(+-1/sqrt(fan_in)), m_k ~ N(0, 0.1^2), s_k = e^-1",
    "evaluation": "learned intensity from z0 = m_k against the true intensity of each sequence "
                  "on a grid over [0, t_end] (the fit) and (t_end, 1.25 t_end] (extrapolation, "
                  "no events seen there): relative L2 error. Log-likelihood per sequence of the "
                  "learned, the true and a constant intensity (each sequence's maximum-"
                  "likelihood rate) for the training events (in sample: the per-sequence z0 "
                  "were fitted to them, so the learned intensity can beat the true one there) "
                  "and for fresh sequences drawn from the same intensities (held out; n_fresh "
                  "per intensity, on [0, t_end] and on the extrapolated window)",
    "data": "fixed data seed 0 (the fresh sequences from a generator of their own); --seed "
            "changes initialisation and training noise only",
}


# ---------------------------------------------------------------------------------------------
# Data


def true_intensity(t, r, phi, log_base=TRUE["log_base"], period=TRUE["period"]):
    return np.exp(log_base + r * np.cos(2 * np.pi * np.asarray(t) / period + phi))


def simulate_events(rng, intensity, t_end, rate_max):
    """Event times on [0, t_end] of a Poisson process with the given intensity(t) <= rate_max,
    by thinning."""
    if not rate_max > 0:
        raise ValueError(f"rate_max must be positive, not {rate_max}")
    candidates = np.sort(rng.uniform(0.0, t_end, rng.poisson(rate_max * t_end)))
    lam = intensity(candidates)
    if np.any(lam > rate_max * (1 + 1e-12)):
        raise ValueError("the intensity exceeds rate_max: thinning would be wrong")
    return candidates[rng.uniform(size=len(candidates)) * rate_max < lam]


def make_dataset(n_sequences, n_fresh=0, extrap=0.25, seed=DATA_SEED):
    """Per sequence k an intensity (r_k, phi_k) and the training events on [0, t_end]; and
    n_fresh held-out sequences of each intensity, drawn independently on [0, (1 + extrap)
    t_end] from a generator of their own (the training events do not depend on n_fresh)."""
    rng = np.random.RandomState(seed)
    r = rng.uniform(*TRUE["r_range"], n_sequences)
    phi = rng.uniform(0, 2 * np.pi, n_sequences)
    t_end = TRUE["t_end"]

    def draw(gen, k, until):
        return simulate_events(gen, lambda t: true_intensity(t, r[k], phi[k]), until,
                               np.exp(TRUE["log_base"] + r[k]))

    events = [draw(rng, k, t_end) for k in range(n_sequences)]
    fresh_rng = np.random.RandomState([seed, 1])
    fresh = [[draw(fresh_rng, k, (1 + extrap) * t_end) for _ in range(n_fresh)]
             for k in range(n_sequences)]
    return {"events": events, "fresh": fresh, "r": r, "phi": phi, "t_end": t_end,
            "t_extrap": (1 + extrap) * t_end}


def pad(events, t_end):
    """Event times (B, n_max) padded with t_end, and the mask of real events (B, n_max)."""
    n_max = max(1, max(len(e) for e in events))
    times = np.full((len(events), n_max), float(t_end))
    mask = np.zeros((len(events), n_max), dtype=bool)
    for b, e in enumerate(events):
        times[b, :len(e)], mask[b, :len(e)] = e, True
    return times, mask


# ---------------------------------------------------------------------------------------------
# Model


class PoissonDynamics:
    """d/dt [z, Lambda] = [f(z), lambda(z)] with lambda(z) = exp(g(z)), for a state (B, d + 1):
    the latent ODE and the integral of its intensity in one solve. `value_and_vjp` is the
    adjoint's f and VJPs in one numpy pass."""

    def __call__(self, y, t, dyn, inten):
        z = y[:, :-1]
        return anp.concatenate([mlp(dyn, z), anp.exp(mlp(inten, z))], axis=1)

    def value_and_vjp(self, g, y, t, dyn, inten):
        z = y[:, :-1]
        lam = np.exp(mlp(inten, z))
        f, g_z, g_dyn = mlp_vjp(dyn, z, g[:, :-1])
        _, g_z2, g_inten = mlp_vjp(inten, z, g[:, -1:] * lam)
        g_y = np.concatenate([g_z + g_z2, np.zeros((len(y), 1))], axis=1)
        return np.concatenate([f, lam], axis=1), g_y, 0.0, (g_dyn, g_inten)


DYNAMICS = PoissonDynamics()


def init_model(rng, n_sequences=0):
    """Shared dynamics and intensity networks, and q(z0_k) = N(q_mean[k], q_std[k]^2)."""
    return {"dyn": init_mlp(rng, LATENT, HIDDEN_MLP, LATENT),
            "inten": init_mlp(rng, LATENT, HIDDEN_MLP, 1),
            "q_mean": 0.1 * rng.randn(n_sequences, LATENT),
            "q_log_std": -np.ones((n_sequences, LATENT))}


def log_likelihood(params, z0, times, mask, t_end, solver, stats=None):
    """Per sequence, sum_i log lambda(z(t_i)) - int_0^t_end lambda(z(t)) dt, from one odeint call
    on the union of all event times (times, mask as from `pad`)."""
    y0 = anp.concatenate([z0, np.zeros((len(z0), 1))], axis=1)
    at = np.concatenate([times, np.full((len(times), 1), float(t_end))], axis=1)
    ys = solve_union(DYNAMICS, y0, 0.0, at, args=(params["dyn"], params["inten"]), stats=stats,
                     **solver)
    log_lam = mlp(params["inten"], ys[:, :-1, :-1])[..., 0]
    return anp.sum(anp.where(mask, log_lam, 0.0), axis=1) - ys[:, -1, -1]


def elbo_terms(params, times, mask, t_end, eps, solver, stats=None):
    """Per sequence: log p(events | z0) at z0 = m + s eps, and KL(q(z0) || N(0, I))."""
    mean, log_std = params["q_mean"], params["q_log_std"]
    z0 = sample_z0(mean, 2 * log_std, eps)
    return (log_likelihood(params, z0, times, mask, t_end, solver, stats),
            kl_to_standard_normal(mean, 2 * log_std))


def learned_intensity(params, z0, t_grid, solver):
    """lambda(z(t)) (B, len(t_grid)) from z0 (B, LATENT)."""
    zs = odeint(lambda z, t, dyn: mlp(dyn, z), z0, t_grid, args=(params["dyn"],), **solver)
    return np.exp(mlp(params["inten"], np.swapaxes(zs, 0, 1))[..., 0])


def objective(data, solver):
    times, mask = pad(data["events"], data["t_end"])

    def loss_and_grad(params, rng, stats):
        eps = rng.randn(len(times), LATENT)

        def negative_elbo(p):
            log_lik, kl = elbo_terms(p, times, mask, data["t_end"], eps, solver, stats)
            return -anp.mean(log_lik - kl)

        return value_and_grad(negative_elbo)(params)

    return loss_and_grad


# ---------------------------------------------------------------------------------------------
# Evaluation and figure


def window_log_likelihood(events, t_grid, intensity, t0, t1):
    """log p(events in [t0, t1] | intensity) = sum log lambda(t_i) - int_t0^t1 lambda dt, for an
    intensity given on the fine grid t_grid (interpolated linearly in log lambda; the integral by
    the trapezoid rule on the grid points inside [t0, t1])."""
    if not t_grid[0] <= t0 < t1 <= t_grid[-1]:
        raise ValueError(f"[{t0}, {t1}] is not inside the grid [{t_grid[0]}, {t_grid[-1]}]")
    events = np.asarray(events, dtype=float)
    events = events[(events >= t0) & (events <= t1)]
    inside = (t_grid > t0) & (t_grid < t1)
    t = np.concatenate([[t0], t_grid[inside], [t1]])
    log_lam = np.log(intensity)
    lam = np.exp(np.interp(t, t_grid, log_lam))
    return float(np.sum(np.interp(events, t_grid, log_lam)) - np.trapezoid(lam, t))


def evaluate(params, data, solver, seed, n_grid=4001):
    """The fitted intensities against the true ones: relative L2 error over the observed window
    [0, t_end] and the extrapolated one (t_end, t_extrap]; the log-likelihood per sequence of the
    training events (in sample) and of fresh events of the same intensities (held out, in each
    window) under the learned intensity (z0 = q's mean), the true one, and a constant rate (the
    maximum-likelihood constant of each sequence's training events)."""
    t_end, t_extrap = data["t_end"], data["t_extrap"]
    times, mask = pad(data["events"], t_end)
    t_grid = np.linspace(0.0, t_extrap, n_grid)
    learned = learned_intensity(params, params["q_mean"], t_grid, solver)
    truth = np.stack([true_intensity(t_grid, r, phi) for r, phi in zip(data["r"], data["phi"])])
    counts = mask.sum(1)
    constant = np.maximum(counts, 0.5)[:, None] / t_end * np.ones_like(truth)  # none: 0.5/t_end

    def rel_l2(window):
        t = t_grid[window]
        return np.sqrt(np.trapezoid((learned[:, window] - truth[:, window]) ** 2, t, axis=1)
                       / np.trapezoid(truth[:, window] ** 2, t, axis=1))

    def log_lik(curves, sets, t0, t1):
        """Mean over sequences of the mean over each sequence's event sets."""
        return float(np.mean([np.mean([window_log_likelihood(e, t_grid, curves[k], t0, t1)
                                       for e in event_sets]) for k, event_sets in enumerate(sets)]))

    fit, ext = rel_l2(t_grid <= t_end), rel_l2(t_grid >= t_end)
    eps = np.random.RandomState(seed).randn(len(times), LATENT)
    elbo_ll, kl = elbo_terms(params, times, mask, t_end, eps, solver)
    results = {
        "intensity_relative_l2_error": float(np.mean(fit)),
        "intensity_relative_l2_error_per_sequence": fit,
        "extrapolated_intensity_relative_l2_error": float(np.mean(ext)),
        "elbo_per_sequence": float(np.mean(elbo_ll - kl)),
        "events_per_sequence": float(np.mean(counts)),
    }
    intensities = {"learned": learned, "true": truth, "constant": constant}
    windows = {"in_sample": ([[e] for e in data["events"]], 0.0, t_end)}
    if data["fresh"] and data["fresh"][0]:
        windows["held_out"] = (data["fresh"], 0.0, t_end)
        windows["held_out_extrapolated"] = (data["fresh"], t_end, t_extrap)
        results["fresh_sequences_per_intensity"] = len(data["fresh"][0])
    for window, (sets, t0, t1) in windows.items():
        for name, curves in intensities.items():
            results[f"log_likelihood_{window}_{name}"] = log_lik(curves, sets, t0, t1)
    return results, (t_grid, learned, truth)


def figure_8(path, data, curves, n_show=4):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t_grid, learned, truth = curves
    n_show = min(n_show, len(learned))
    fig, axes = plt.subplots(2, n_show, figsize=(3.8 * n_show, 5.2), sharex=True,
                             gridspec_kw={"height_ratios": [3, 1.3]}, squeeze=False)
    for k in range(n_show):
        events = data["events"][k]
        ax, err = axes[0, k], axes[1, k]
        ax.plot(t_grid, learned[k], color="tab:blue", lw=2, label="learned $\\lambda(t)$")
        ax.plot(t_grid, truth[k], color="k", lw=1, ls="--", label="true $\\lambda(t)$")
        ax.plot(events, np.zeros_like(events), "o", color="tab:red", ms=4, clip_on=False,
                label="events")
        ax.axvline(data["t_end"], color="0.5", lw=0.8, ls=":")
        ax.set_ylim(bottom=0)
        ax.set_title(f"sequence {k + 1} ({len(events)} events)", fontsize=10)
        err.plot(t_grid, learned[k] - truth[k], color="tab:purple", lw=1.2)
        err.axhline(0, color="0.6", lw=0.8)
        err.axvline(data["t_end"], color="0.5", lw=0.8, ls=":")
        err.set_xlabel("t")
    axes[0, 0].set_ylabel("intensity")
    axes[1, 0].set_ylabel("learned - true")
    axes[0, 0].legend(fontsize=8, loc="upper right")
    fig.suptitle("Figure 8: latent ODE with a Poisson process likelihood (reproduction; "
                 "dotted: end of the observed window)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def figure_training(path, history):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(history["loss"])
    ax.set_xlabel("iteration")
    ax.set_ylabel("-ELBO per sequence")
    ax.set_title("Poisson latent ODE: training")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------


def main(argv=None):
    run = Run("poisson", argv, description=__doc__.split("\n\n")[0], extra_args=add_run_args)
    cfg = run.pick(smoke=dict(n_sequences=3, n_fresh=2, iters=5, tol=1e-5, ckpt_every=2),
                   quick=dict(n_sequences=8, n_fresh=20, iters=500, tol=1e-5, ckpt_every=25),
                   full=dict(n_sequences=16, n_fresh=50, iters=2000, tol=1.5e-8, ckpt_every=25))
    solver, solver_text = solver_from_args(run.args, cfg["tol"])
    tol = solver["rtol"]
    data = make_dataset(cfg["n_sequences"], cfg["n_fresh"])
    init = lambda rng: init_model(rng, cfg["n_sequences"])  # noqa: E731
    state = train(run, "latent_ode", init, objective(data, solver),
                  cfg["iters"], 0.01, StopAfter(run.args.stop_after), cfg["ckpt_every"])
    results, curves = evaluate(state["params"], data, solver, run.seed + 1)
    print("poisson: " + ", ".join(f"{k} {v:.4f}" for k, v in results.items()
                                  if isinstance(v, float)), flush=True)
    results["solver_speed"] = measure_solvers(lambda sv: objective(data, sv), state["params"],
                                              sorted({tol, PAPER_TOL}))
    results["tolerance_effect"] = []
    for t in (PAPER_TOL, 1e-6, 1e-5, 1e-4):
        at_t = evaluate(state["params"], data, dict(solver, rtol=t, atol=t), run.seed + 1)[0]
        results["tolerance_effect"].append(
            dict(tol=t, **{k: v for k, v in at_t.items() if isinstance(v, float)}))
    figure_8(run.path("fig8.png"), data, curves)
    figure_training(run.path("training.png"), state["history"])
    results["training"] = training_summary(state)
    note = partial_note({"latent_ode": (state["step"], cfg["iters"])})
    if note:
        results["note"] = note
    results["solver"] = solver
    choices = dict(CHOICES)
    choices.update({
        "data size": f"{cfg['n_sequences']} sequences",
        "iterations": cfg["iters"],
        "solver": solver_text,
        "solver measurements": "solver_speed: seconds and NFE of one training gradient of the "
                               "trained model per method, tolerance and adjoint norm; "
                               "tolerance_effect: the evaluation repeated at each tolerance"})
    run.save_results(results, choices=choices)
    print(f"poisson: wrote {run.out_dir}", flush=True)
    return 0
