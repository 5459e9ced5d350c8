"""Event times of inhomogeneous Poisson processes with known intensities (simulated by
thinning): the training sequences and fresh, held-out ones of the same intensities."""
import numpy as np

DATA_SEED = 0
# True intensities: lambda(t) = exp(log_base + r cos(2 pi t / period + phi)), the read-out of a
# 2-d rotating latent state, so that a latent ODE can represent it exactly.
TRUE = dict(t_end=10.0, log_base=np.log(2.0), period=5.0, r_range=(0.5, 1.5))


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
