"""The latent ODE with a Poisson process likelihood: per-sequence q(z0), dynamics f(z), intensity
lambda(z) = exp(g(z)), the likelihood from one odeint call whose state carries the integral of
the intensity, the training objective and the evaluation against the true intensities."""
import autograd.numpy as anp
import numpy as np
from autograd import value_and_grad

from odeint_autograd import odeint
from reproduce.latent import init_mlp, kl_to_standard_normal, mlp, mlp_vjp, sample_z0, solve_union

from .data import pad, true_intensity

LATENT, HIDDEN_MLP = 4, 20


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
