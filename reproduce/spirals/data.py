"""The spirals of Table 2 and Figures 9 and 10: a dense Archimedean arm in each direction (the
family of the authors' public example, torchdiffeq/examples/latent_ode.py), windows of it with
Gaussian noise, the train/validation/test split and the irregular samples of each series."""
import numpy as np

N_OBS = (30, 50, 100)  # Table 2's numbers of observed points per series
DATA_SEED = 0  # the data and the train/test split are fixed; --seed changes the training only
SPIRAL = dict(n_dense=1000, stop=6 * np.pi, a=0.0, b=0.3, noise_std=0.3, window=100, extrap=100)


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
    ranges over 0..n_dense - window, so that the training windows can cover the whole arm, the
    part where the test series are extrapolated included; its points past the arm's end are NaN
    (they lie in its extrapolation part, which is never used).
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


def extrapolation_coverage(data, window=SPIRAL["window"], extrap=SPIRAL["extrap"],
                           n_dense=SPIRAL["n_dense"]):
    """Per direction ("counter-clockwise", "clockwise"): the share of the test series'
    extrapolation points that lie inside some training series' observation window ("covered"),
    and the share that lie on the arm's last `window` points ("arm end"), where no training
    window would reach if training series started where test series may."""
    out = {}
    for name, d in (("counter-clockwise", 1), ("clockwise", -1)):
        mine = data["direction"] == d
        seen = np.zeros(n_dense, dtype=bool)
        for start in data["start"][data["train"][mine[data["train"]]]]:
            seen[start:start + window] = True
        test = data["start"][data["test"][mine[data["test"]]]]
        points = (test[:, None] + np.arange(window, window + extrap)).ravel()
        out[name] = {"covered": float(seen[points].mean()),
                     "arm end": float((points >= n_dense - window).mean())}
    return out
