"""Spirals (Table 2, Figures 9, 10): the data generator, the latent ODE's pieces (ELBO against a
direct Monte Carlo computation, the union-of-times solve against per-series solves, the
hand-written VJPs against autograd), the RNN baselines, and the run itself (--smoke, --resume)."""
import collections
import json
import os
import re
import time

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad, value_and_grad
from scipy.integrate import solve_ivp
from scipy.stats import norm, t as t_dist

from odeint_autograd import SolverStats, odeint
from reproduce import latent as L
from reproduce import spirals as S
from reproduce.spirals import data as SD
from reproduce.spirals import experiment as SE
from reproduce.spirals import models as SM
from reproduce.latent import (MLPDynamics, encode, init_gru, init_mlp, init_rnn, mlp, mlp_vjp,
                              rnn_step, solve_union, time_gaps, union_times)

TIGHT = dict(method="adams", rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------------------------
# Data


def _roles(n_train, n_held):
    return np.array(["train"] * n_train + ["val"] * n_held + ["test"] * n_held)


def test_generator_shapes_and_halves():
    data = SD.generate_spirals(np.random.RandomState(0), _roles(20, 10))
    length = SD.SPIRAL["window"] + SD.SPIRAL["extrap"]
    assert data["t"].shape == (length,)
    assert data["clean"].shape == data["noisy"].shape == (40, length, 2)
    np.testing.assert_allclose(np.diff(data["t"]), 6 * np.pi / 999)
    assert data["t"][0] == 0
    for role in ("train", "val", "test"):
        rows = data["role"] == role
        assert np.sum(data["direction"][rows] == 1) == np.sum(data["direction"][rows] == -1)
    for d in (1, -1):  # each spiral of a direction starts at a different point
        starts = data["start"][data["direction"] == d]
        assert len(np.unique(starts)) == len(starts)
    with pytest.raises(ValueError, match="even"):
        SD.generate_spirals(np.random.RandomState(0), _roles(7, 2))
    with pytest.raises(ValueError, match="different points"):
        SD.generate_spirals(np.random.RandomState(0), _roles(2000, 2))


def test_training_windows_cover_every_test_extrapolation_point():
    """Every arm index a test series is scored on lies in some training series' observation
    window (of its direction); held-out series lie wholly on the arm, and the training series'
    unused extrapolation parts are NaN, so no score can read them."""
    data = SD.make_dataset(1000)
    w, e, n_dense = SD.SPIRAL["window"], SD.SPIRAL["extrap"], SD.SPIRAL["n_dense"]
    assert (len(data["train"]), len(data["val"]), len(data["test"])) == (800, 100, 100)
    for d in (1, -1):
        train = data["start"][data["train"]][data["direction"][data["train"]] == d]
        seen = np.zeros(n_dense, bool)
        for s0 in train:
            seen[s0:s0 + w] = True
        test = data["start"][data["test"]][data["direction"][data["test"]] == d]
        scored = np.concatenate([np.arange(s0 + w, s0 + w + e) for s0 in test])
        assert seen[scored].all()
        assert train.max() > n_dense - w - e  # training windows reach past the held-out starts
    held = np.concatenate([data["val"], data["test"]])
    assert np.all(data["start"][held] + w + e <= n_dense)
    assert np.isfinite(data["clean"][held]).all()
    assert np.isfinite(data["clean"][data["train"], :w]).all()
    late = data["train"][data["start"][data["train"]] > n_dense - w - e]
    assert len(late) and np.isnan(data["clean"][late, w:]).any()


def test_directions_by_angular_velocity():
    """Counter-clockwise spirals turn with positive angular velocity about their arm's centre
    (5, 0), clockwise ones with negative about (-5, 0), at every step."""
    data = SD.generate_spirals(np.random.RandomState(1), _roles(0, 10))
    for path, d in zip(data["clean"], data["direction"]):
        centre = np.array([5.0 if d == 1 else -5.0, 0.0])
        p, v = path[:-1] - centre, np.diff(path, axis=0)
        cross = p[:, 0] * v[:, 1] - p[:, 1] * v[:, 0]
        assert np.all(np.sign(cross) == d)
        assert SM.decoded_direction(path) == d  # the figure-10 labelling agrees


def test_noise_level():
    data = SD.generate_spirals(np.random.RandomState(2), _roles(0, 50))
    residual = data["noisy"] - data["clean"]
    assert abs(residual.std() - 0.3) < 0.01
    assert abs(residual.mean()) < 0.01


def test_subsample_without_replacement():
    idx = SD.subsample(np.random.RandomState(3), 200, 30)
    assert idx.shape == (200, 30)
    assert np.all(np.diff(idx, axis=1) > 0)  # sorted and no repeats
    assert idx.min() >= 0 and idx.max() < 100
    assert len({tuple(r) for r in idx}) > 190  # different points for different spirals
    np.testing.assert_array_equal(SD.subsample(np.random.RandomState(0), 3, 100),
                                  np.tile(np.arange(100), (3, 1)))
    with pytest.raises(ValueError, match="n_obs"):
        SD.subsample(np.random.RandomState(0), 3, 101)


def test_split_is_fixed_and_stratified():
    a, b = SD.make_dataset(100), SD.make_dataset(100)
    np.testing.assert_array_equal(a["test"], b["test"])
    np.testing.assert_array_equal(a["noisy"], b["noisy"])
    parts = [a["train"], a["val"], a["test"]]
    assert sum(map(len, parts)) == 100 and len(np.unique(np.concatenate(parts))) == 100
    for rows in (a["val"], a["test"]):
        assert np.sum(a["direction"][rows] == 1) == np.sum(a["direction"][rows] == -1) > 0


# ---------------------------------------------------------------------------------------------
# Shared latent-ODE pieces


def test_mlp_vjp_and_dynamics_vjp_match_autograd():
    # one hidden layer: the draws of W1, b1, W2, b2 in that order (as every committed model's)
    a, b = init_mlp(np.random.RandomState(3), 4, 20, 3), np.random.RandomState(3)
    bound1, bound2 = 1 / np.sqrt(4), 1 / np.sqrt(20)
    expected = {"W1": b.uniform(-bound1, bound1, (4, 20)), "b1": b.uniform(-bound1, bound1, 20),
                "W2": b.uniform(-bound2, bound2, (20, 3)), "b2": b.uniform(-bound2, bound2, 3)}
    assert list(a) == list(expected)
    for k in a:
        np.testing.assert_array_equal(a[k], expected[k])
    rng = np.random.RandomState(4)
    x, g = rng.randn(6, 4), rng.randn(6, 3)
    for hidden in (20, (20, 20), (7, 5, 9)):
        p = init_mlp(rng, 4, hidden, 3)
        widths = [4, *np.atleast_1d(hidden), 3]
        assert [p[f"W{i + 1}"].shape for i in range(len(widths) - 1)] == list(
            zip(widths[:-1], widths[1:]))
        for act in ("elu", "relu", "tanh"):
            h = x  # the forward pass written out layer by layer
            for i in range(1, len(widths) - 1):
                h = {"elu": lambda a: np.where(a > 0, a, np.expm1(np.minimum(a, 0))),
                     "relu": lambda a: np.maximum(a, 0), "tanh": np.tanh}[act](
                    h @ p[f"W{i}"] + p[f"b{i}"])
            depth = len(widths) - 1
            np.testing.assert_allclose(mlp(p, x, act), h @ p[f"W{depth}"] + p[f"b{depth}"])
            out, g_x, g_p = mlp_vjp(p, x, g, act)
            np.testing.assert_allclose(out, mlp(p, x, act))
            np.testing.assert_allclose(g_x, grad(lambda xx: anp.sum(mlp(p, xx, act) * g))(x))
            ref = grad(lambda pp: anp.sum(mlp(pp, x, act) * g))(p)
            assert list(g_p) == list(p)  # the key order odeint flattens by
            for k in p:
                np.testing.assert_allclose(g_p[k], ref[k], atol=1e-12)
    f = MLPDynamics("elu")
    theta, z, a = init_mlp(rng, 4, 20, 4), rng.randn(5, 4), rng.randn(5, 4)
    value, g_z, _, (g_theta,) = f.value_and_vjp(a, z, 0.0, theta)
    np.testing.assert_allclose(value, f(z, 0.0, theta))
    np.testing.assert_allclose(g_z, grad(lambda zz: anp.sum(f(zz, 0.0, theta) * a))(z))


def test_union_of_times_solve_equals_per_series_solves():
    rng = np.random.RandomState(5)
    theta, z0 = init_mlp(rng, 4, 20, 4), rng.randn(3, 4)
    times = np.array([[0.0, 0.3, 0.9, 1.4], [0.2, 0.3, 0.5, 2.0], [0.7, 1.1, 1.2, 1.3]])
    t_union, rows = union_times(0.0, times)
    np.testing.assert_array_equal(t_union[rows], times)
    assert t_union[0] == 0 and np.all(np.diff(t_union) > 0)
    f = MLPDynamics("elu")
    joint = solve_union(f, z0, 0.0, times, args=(theta,), **TIGHT)
    assert joint.shape == (3, 4, 4)
    for b in range(3):
        t_b = times[b] if times[b, 0] > 0 else times[b, 1:]
        single = odeint(f, z0[b], np.concatenate([[0.0], t_b]), args=(theta,), **TIGHT)[1:]
        np.testing.assert_allclose(joint[b, -len(t_b):], single, rtol=1e-7, atol=1e-8)
    np.testing.assert_array_equal(joint[0, 0], z0[0])  # observed at t0: z0 itself
    # and the gradient of a loss of the gathered states is the sum of the per-series gradients
    w = rng.randn(3, 4, 4)
    g_joint = grad(lambda th: anp.sum(w * solve_union(f, z0, 0.0, times, args=(th,),
                                                        **TIGHT)))(theta)

    def per_series(th):
        total = 0.0
        for b in range(3):
            t_b = times[b] if times[b, 0] > 0 else times[b, 1:]
            zs = odeint(f, z0[b:b + 1], np.concatenate([[0.0], t_b]), args=(th,), **TIGHT)
            total = total + anp.sum(w[b, -len(t_b):] * zs[1:, 0])
        return total

    g_single = grad(per_series)(theta)
    for k in theta:
        np.testing.assert_allclose(g_joint[k], g_single[k], rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="precede"):
        union_times(0.5, times)


def test_encoder_mask_ignores_padding():
    rng = np.random.RandomState(6)
    p = init_rnn(rng, 3, 25, 8)
    xs, times = rng.randn(1, 4, 2), np.array([[0.1, 0.4, 0.5, 0.9]])
    mu, logvar = encode(p, xs, time_gaps(0.0, times))
    padded_x = np.concatenate([xs, rng.randn(1, 3, 2)], axis=1)
    padded_t = np.concatenate([times, [[1.0, 1.0, 1.0]]], axis=1)
    mask = np.arange(7)[None] < 4
    mu2, logvar2 = encode(p, padded_x, time_gaps(0.0, padded_t), mask)
    np.testing.assert_allclose(mu2, mu)
    np.testing.assert_allclose(logvar2, logvar)
    np.testing.assert_allclose(time_gaps(0.0, times), [[0.1, 0.3, 0.1, 0.4]])


def test_gru_with_open_gates_is_the_vanilla_rnn_and_with_a_shut_update_gate_keeps_its_state():
    rng = np.random.RandomState(8)
    p = init_gru(rng, 3, 25, 8)
    vanilla = {k: p[k] for k in ("Wh", "bh", "Wo", "bo")}
    h, x = np.tanh(rng.randn(5, 25)), rng.randn(5, 3)
    assert set(p) == set(init_rnn(rng, 3, 25, 8)) | {"Wu", "bu", "Wr", "br"}
    assert not np.allclose(rnn_step(p, h, x), rnn_step(vanilla, h, x))
    open_gates = dict(p, bu=np.full(25, 60.0), br=np.full(25, 60.0))
    np.testing.assert_allclose(rnn_step(open_gates, h, x), rnn_step(vanilla, h, x), atol=1e-12)
    shut = dict(p, bu=np.full(25, -60.0))
    np.testing.assert_allclose(rnn_step(shut, h, x), h, atol=1e-12)
    # a shut reset gate hides the state from the candidate, not from the update
    u = 1.0 / (1.0 + np.exp(-(np.concatenate([x, h], 1) @ p["Wu"] + p["bu"])))
    candidate = np.tanh(np.concatenate([x, 0 * h], 1) @ p["Wh"] + p["bh"])
    np.testing.assert_allclose(rnn_step(dict(p, br=np.full(25, -60.0)), h, x),
                               (1 - u) * h + u * candidate, atol=1e-12)
    # the gates' gradients by autograd against central differences, through a whole encoding
    xs, times = rng.randn(2, 6, 2), np.sort(rng.uniform(0, 2, (2, 6)), axis=1)
    gaps = time_gaps(0.0, times)

    for gate in ("bu", "br"):
        def f(b):
            mu, logvar = encode(dict(p, **{gate: b}), xs, gaps)
            return anp.sum(mu ** 2) + anp.sum(anp.sin(logvar))

        g, e = grad(f)(p[gate]), 1e-6
        fd = [(f(p[gate] + e * d) - f(p[gate] - e * d)) / (2 * e) for d in np.eye(25)]
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_elbo_against_direct_monte_carlo():
    """The ELBO of a tiny latent ODE (one reparameterised sample per copy of a series, KL in
    closed form) against a direct Monte Carlo estimate E_q[log p(x|z) + log p(z) - log q(z)]
    computed series by series: its own times, scipy's solve_ivp, scipy's normal densities."""
    rng = np.random.RandomState(7)
    params = SM.init_latent_ode(rng)
    params["rec"]["bo"][:SM.LATENT] += 1.0  # q away from the prior: a KL well above the MC noise
    params["rec"]["bo"][SM.LATENT:] -= 1.0
    xs = rng.randn(2, 5, 2) * 2
    times = np.array([[0.0, 0.2, 0.5, 0.6, 1.1], [0.3, 0.4, 0.9, 1.5, 1.7]])
    K = 3000
    eps = rng.randn(2, K, SM.LATENT)
    log_px, kl = SM.elbo_terms(params, np.repeat(xs, K, axis=0), np.repeat(times, K, axis=0),
                              eps.reshape(2 * K, SM.LATENT), TIGHT)
    log_px, kl = log_px.reshape(2, K), kl.reshape(2, K)
    np.testing.assert_allclose(kl, np.broadcast_to(kl[:, :1], kl.shape))
    mu, logvar = SM.posterior(params, xs, times)
    sigma = np.exp(0.5 * logvar)
    th = params["dyn"]
    for b in range(2):
        z0 = mu[b] + sigma[b] * eps[b]  # (K, LATENT)
        sol = solve_ivp(lambda t, y: mlp(th, y.reshape(K, -1)).ravel(), (0.0, times[b, -1]),
                        z0.ravel(), t_eval=times[b], method="DOP853", rtol=1e-11, atol=1e-11)
        zs = sol.y.T.reshape(len(times[b]), K, -1)  # (n, K, LATENT)
        x_mean = mlp(params["dec"], zs, "relu")
        direct_px = norm.logpdf(xs[b][:, None], x_mean, SD.SPIRAL["noise_std"]).sum(axis=(0, 2))
        np.testing.assert_allclose(log_px[b], direct_px, rtol=1e-6)  # same samples: same terms
        log_ratio = norm.logpdf(z0).sum(1) - norm.logpdf(z0, mu[b], sigma[b]).sum(1)
        direct = np.mean(direct_px + log_ratio)
        ours = np.mean(log_px[b]) - kl[b, 0]
        se = np.std(log_ratio) / np.sqrt(K)
        assert abs(ours - direct) < 4 * se + 1e-9, (ours, direct, se)
        assert se < 0.1 * kl[b, 0]  # the check has teeth: the KL is far above the noise


# ---------------------------------------------------------------------------------------------
# RNN baselines


def test_encode_cut_hides_the_later_observations_from_the_recognition_network():
    """With encode_cut the posterior reads only the observations before each series' cut (drawn
    in [c, 1] of the window), while the likelihood scores them all."""
    data = SD.make_dataset(40)
    xs, times = SD.observed(data, 30, data["train"][:6])
    window = SD.SPIRAL["window"] * SM.T_UNIT
    seen = SM.encoder_sees(times, 0.6, np.random.RandomState(0))
    assert seen[:, 0].all() and np.all(np.diff(seen.astype(int), axis=1) <= 0)  # a prefix
    assert np.all(times[~seen] > 0.6 * window) and not seen.all()
    params = SM.init_latent_ode(np.random.RandomState(11))
    late = np.where(seen[..., None], xs, xs + 3.0)  # only the unseen observations move
    np.testing.assert_array_equal(SM.posterior(params, xs, times, seen)[0],
                                  SM.posterior(params, late, times, seen)[0])
    assert not np.array_equal(SM.posterior(params, xs, times)[0],
                              SM.posterior(params, late, times)[0])
    # the objective draws the rows, the noise, then the cut, and scores every observation
    solver = dict(method="adams", rtol=1e-6, atol=1e-6)
    loss = SM.latent_ode_objective(xs, times, solver, encode_cut=0.6)(
        params, np.random.RandomState(7), None)[0]
    rng = np.random.RandomState(7)
    eps = rng.randn(len(xs), SM.LATENT)
    log_px, kl = SM.elbo_terms(params, xs, times, eps, solver,
                               seen=SM.encoder_sees(times, 0.6, rng))
    assert loss == pytest.approx(-np.mean(log_px - kl), rel=1e-12)


def test_rnn_dt_uses_the_gaps_and_the_plain_rnn_does_not():
    rng = np.random.RandomState(8)
    xs = rng.randn(3, 6, 2)
    times = np.sort(rng.uniform(0, 1.8, (3, 6)), axis=1)
    t_future = np.linspace(1.9, 3.7, 10)
    stretched = times * 1.5
    for with_dt in (False, True):
        p = SM.init_rnn_baseline(np.random.RandomState(9), with_dt)
        recon, extrap = SM.rnn_predict(p, xs, times, t_future, with_dt, step=0.3)
        assert recon.shape == (3, 5, 2) and extrap.shape == (3, 10, 2)
        recon2, _ = SM.rnn_predict(p, xs, stretched, t_future * 1.5, with_dt, step=0.45)
        assert np.allclose(recon, recon2) != with_dt
        assert np.isfinite(SM.rnn_nll(p, xs, times, with_dt))
    with pytest.raises(ValueError, match="step"):
        SM.rnn_predict(p, xs, times, t_future, False, None)
    # the RNN + dt is told the step it runs free at: another step, other predictions
    p = SM.init_rnn_baseline(np.random.RandomState(9), True)
    a = SM.rnn_predict(p, xs, times, times[:, -1].max() + 0.3 * np.arange(1, 4), True, 0.3)[1]
    b = SM.rnn_predict(p, xs, times, times[:, -1].max() + 0.3 * np.arange(1, 4), True, 0.2)[1]
    assert not np.allclose(a, b)


def test_plain_rnn_steps_are_placed_at_its_training_gap():
    """The plain RNN's k-th free-running step sits at t_last + k * step: where the target times
    fall on those points its predictions are its raw outputs, and between them the linear
    interpolation of its neighbours."""
    rng = np.random.RandomState(10)
    p = SM.init_rnn_baseline(rng, False)
    xs = rng.randn(2, 5, 2)
    times = np.array([[0.0, 0.5, 1.0, 1.5, 2.0], [0.0, 1.0, 1.5, 2.5, 3.0]])
    step = 0.5
    _, raw = SM.rnn_run(p, xs, np.zeros((2, 4 + 8)), 8, False)
    on_grid = times[:, -1:] + step * np.arange(1, 5)  # the first four steps of each series
    for b in range(2):
        _, at = SM.rnn_predict(p, xs[b:b + 1], times[b:b + 1], on_grid[b], False, step)
        np.testing.assert_allclose(at[0], raw[b, :4], rtol=1e-12, atol=1e-12)
        _, mid = SM.rnn_predict(p, xs[b:b + 1], times[b:b + 1], on_grid[b][:3] + step / 2,
                               False, step)
        np.testing.assert_allclose(mid[0], (raw[b, :3] + raw[b, 1:4]) / 2, atol=1e-12)
    # between the last observation and the first step: towards the last observation
    _, first = SM.rnn_predict(p, xs[:1], times[:1], [times[0, -1] + step / 4], False, step)
    np.testing.assert_allclose(first[0, 0], 0.75 * xs[0, -1] + 0.25 * raw[0, 0], atol=1e-12)


def test_rnn_dt_fed_the_true_gaps_reads_each_gap_to_the_next_time():
    """rnn_dt_at_times feeds t_future[0] - t_last, then t_future's steps, and returns the raw
    outputs at t_future: where the times fall on its stepping grid it is rnn_predict exactly."""
    rng = np.random.RandomState(11)
    p = SM.init_rnn_baseline(rng, True)
    xs = rng.randn(2, 5, 2)
    times = np.array([[0.0, 0.5, 1.0, 1.5, 2.0], [0.0, 1.0, 1.5, 2.5, 2.75]])
    t_future = 3.0 + 0.25 * np.arange(6)
    got = SM.rnn_dt_at_times(p, xs, times, t_future)
    gaps = np.concatenate([np.diff(times, axis=1), np.array([[1.0], [0.25]]),
                           np.full((2, 5), 0.25)], axis=1)
    np.testing.assert_array_equal(got, SM.rnn_run(p, xs, gaps, 6, True)[1])
    on_grid = times[1:, -1] + 0.25 * np.arange(1, 7)
    np.testing.assert_allclose(SM.rnn_dt_at_times(p, xs[1:], times[1:], on_grid),
                               SM.rnn_predict(p, xs[1:], times[1:], on_grid, True, 0.25)[1],
                               rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="after every series' last observation"):
        SM.rnn_dt_at_times(p, xs, times, [2.5, 3.0])


# ---------------------------------------------------------------------------------------------
# Scoring


def test_a_perfect_model_scores_zero_noise_free_and_the_noise_on_noisy_points():
    data = SD.make_dataset(400)
    w, rows = SD.SPIRAL["window"], data["test"]
    perfect = SM.score_predictions(data["clean"][rows, w:], data, rows)
    assert perfect["rmse_clean"] == 0.0
    assert abs(perfect["rmse_noisy"] - SD.SPIRAL["noise_std"]) < 0.01
    shifted = SM.score_predictions(data["clean"][rows, w:] + 0.1, data, rows)
    assert abs(shifted["rmse_clean"] - 0.1) < 1e-12
    # scored on the test rows' own points: another set of rows does not score zero
    assert SM.score_predictions(data["clean"][data["val"], w:], data, rows)["rmse_clean"] > 1


def test_last_observation_baseline_against_a_hand_computation():
    data = SD.make_dataset(100)
    w, rows, n = SD.SPIRAL["window"], data["test"], 30
    got = SM.score("last_observation", None, data, n, rows, solver=None)
    sq = []
    for r in rows:
        last = data["noisy"][r, data["obs_idx"][n][r][-1]]
        for k in range(SD.SPIRAL["extrap"]):
            sq.extend((last - data["clean"][r, w + k]) ** 2)
    assert abs(got["rmse_clean"] - np.sqrt(np.mean(sq))) < 1e-12
    # the linear baseline goes through the last observations when they lie on a line
    times = np.array([[0.0, 1.0, 2.0, 3.0, 4.0]])
    xs = np.stack([2 * times + 1, -times], axis=-1)
    np.testing.assert_allclose(SM.linear_extrapolation(xs, times, np.array([5.0, 7.0]))[0],
                               [[11.0, -5.0], [15.0, -7.0]])


def test_rmse_against_a_hand_computation_and_its_refusals():
    assert SM.rmse([[1.0, 2.0], [3.0, 4.0]], np.zeros((2, 2))) == np.sqrt(30 / 4)
    with pytest.raises(ValueError, match="one non-empty shape"):
        SM.rmse(np.zeros((3, 100, 2)), np.ones((100, 2)))  # would broadcast to 1.0
    with pytest.raises(ValueError, match="one non-empty shape"):
        SM.rmse(np.zeros((0, 2)), np.zeros((0, 2)))
    with pytest.raises(ValueError, match="non-finite"):
        SM.rmse(np.zeros(2), [0.0, np.nan])
    assert SM.rmse([0.0, np.nan], np.zeros(2)) == np.inf  # a diverged model scores worst
    data = SD.make_dataset(100)
    late = data["train"][data["start"][data["train"]] > 800][:2]  # running past the arm's end
    with pytest.raises(ValueError, match="non-finite"):
        SM.score_predictions(np.zeros((2, 100, 2)), data, late)


def test_extrapolation_coverage_against_a_hand_count():
    """Two test series per direction (extrapolation points: start + 100..199) and one training
    window (start + 0..99) per direction, counted by hand."""
    data = {"direction": np.array([1, 1, 1, -1, -1, -1]),
            "start": np.array([0, 800, 150, 700, 10, 150]),
            "test": np.array([0, 1, 3, 4]), "train": np.array([2, 5])}
    cover = SD.extrapolation_coverage(data)
    # counter-clockwise: the window 150..249 covers 150..199 of series 0's 100..199 and none of
    # series 1's 900..999, which are the arm's last 100 points
    assert cover["counter-clockwise"] == {"covered": 50 / 200, "arm end": 100 / 200}
    # clockwise: 150..249 covers 150..209 of series 4's 110..209, none of series 3's 800..899
    assert cover["clockwise"] == {"covered": 60 / 200, "arm end": 0.0}
    full = SD.extrapolation_coverage(SD.make_dataset(1000))
    assert all(c["covered"] == 1.0 and 0.03 < c["arm end"] < 0.1 for c in full.values())


def test_rmse_by_horizon_scores_each_stretch_of_the_extrapolation_on_its_own():
    rng = np.random.RandomState(3)
    target = rng.randn(5, 100, 2)
    pred = target.copy()
    pred[:, 50:75] += 0.2  # wrong only in the third stretch
    np.testing.assert_allclose(SM.rmse_by_horizon(pred, target), [0, 0, 0.2, 0], atol=1e-12)
    assert len(SM.rmse_by_horizon(pred, target, 3)) == 3


def test_window_fit_scores_the_fit_at_the_right_points(monkeypatch):
    """A model that returns the noise-free points (the latent ODE's path at every window time,
    an RNN's one-step predictions at observations 2..n) fits the window exactly; shifted by one
    observation, it does not."""
    data = SD.make_dataset(100)
    w, rows, n = SD.SPIRAL["window"], data["test"], 30
    idx = data["obs_idx"][n][rows]
    clean = data["clean"][rows]
    at_obs = np.take_along_axis(clean[:, :w], idx[..., None], axis=1)

    def window_fit(model):
        return SM.rmse(*SM.predictions(model, None, data, n, rows, None, step=1.0)[1])

    monkeypatch.setattr(SM, "rnn_predict", lambda *a: (at_obs[:, 1:], None))
    assert window_fit("rnn") == 0.0
    monkeypatch.setattr(SM, "rnn_predict", lambda *a: (at_obs[:, :-1], None))
    assert window_fit("rnn_dt") > 0.05
    monkeypatch.setattr(SM, "latent_ode_predict", lambda p, xs, times, t, solver: (clean, None))
    assert window_fit("latent_ode") == 0.0
    monkeypatch.setattr(SM, "latent_ode_predict",
                        lambda p, xs, times, t, solver: (clean + 0.3, None))
    assert abs(window_fit("latent_ode") - 0.3) < 1e-12
    assert SM.predictions("last_observation", None, data, n, rows, None)[1] is None


def test_fit_z0_recovers_a_path_the_model_decoded_and_never_fits_worse_than_its_start():
    rng = np.random.RandomState(3)
    params = SM.init_latent_ode(rng)
    t = np.linspace(0.0, 1.5, 40)
    z_true = rng.randn(5, SM.LATENT)
    index = np.stack([np.sort(rng.choice(len(t), 12, replace=False)) for _ in range(5)])
    target = SM.decode(params, z_true, t, TIGHT)[0][np.arange(5)[:, None], index]
    start = z_true + 0.1 * rng.randn(*z_true.shape)  # in the basin of z_true
    solver = dict(method="adams", rtol=1e-8, atol=1e-8)

    def error(z0):
        return np.sqrt(np.mean((SM.decode(params, z0, t, TIGHT)[0][np.arange(5)[:, None], index]
                                - target) ** 2))

    fitted = SM.fit_z0(params, start, t, index, target, solver, maxiter=200)
    assert fitted.shape == z_true.shape
    assert error(start) > 1e-2 and error(fitted) < 1e-2 * error(start)
    one_step = SM.fit_z0(params, start, t, index, target, solver, maxiter=1)
    assert error(one_step) <= error(start)


# ---------------------------------------------------------------------------------------------
# The run


def _run(tmp_path, name, *extra):
    argv = ["--smoke", "--out", str(tmp_path / name), "--checkpoint-dir",
            str(tmp_path / (name + "_ckpt"))] + list(extra)
    return S.main(argv)


@pytest.mark.slow
def test_smoke_run_writes_results_and_resume_gives_the_same_numbers(tmp_path):
    assert _run(tmp_path, "whole") == 0
    record = json.loads((tmp_path / "whole" / "results.json").read_text())
    table = record["results"]["table2_rmse"]
    latent = ["Latent ODE", "Latent ODE, no warm restart", "Latent ODE, tanh RNN encoder, 3 starts",
              "Latent ODE, one-layer dynamics, tanh RNN encoder, 1 start",
              "Latent ODE, one-layer dynamics, tanh RNN encoder, 1 start, window ELBO"]
    assert list(table) == ["RNN", "RNN + dt", "RNN + dt, fed the true gaps"] + [
        row for label in latent for row in (label, f"{label}, z0 by MAP")] + [
        "Last observation", "Linear extrapolation"]
    for row in table.values():
        assert set(row) == {"30", "50", "100"}
        for cell in row.values():
            assert cell["rmse_noisy"] > 0 and cell["rmse_clean"] > 0
            assert cell["rmse_clean"] == np.mean(cell["rmse_clean_seeds"])
    assert "spirals" in record["choices"] and "noise" in record["choices"]
    # the iterations by row label, a warm restart's count with its first stage inside it
    smoke = SE.SETTINGS["smoke"]
    assert record["choices"]["iterations"].startswith(
        f"RNN (rnn): {smoke['iters']['rnn']}; RNN + dt (rnn_dt): {smoke['iters']['rnn_dt']}; "
        f"Latent ODE ({SM.LATENT_ODE}): {smoke['iters'][SM.LATENT_ODE]}, the first "
        f"{smoke['iters']['latent_ode_gru']} of them its first stage ('Latent ODE, no warm "
        f"restart'), and 5 discarded starts of {smoke['start_iters']}; ")
    for label in latent:  # each MAP cell says how its fits stopped, and the report tells
        for cell in table[f"{label}, z0 by MAP"].values():
            assert [set(f) >= {"converged", "iterations", "maxiter", "max_abs_gradient"}
                    for f in cell["lbfgs_seeds"]] == [True] * len(cell["seeds"])
    from reproduce.spirals.report import map_convergence
    fits = sum(len(c["seeds"]) for label in latent for c in table[f"{label}, z0 by MAP"].values())
    assert re.search(rf"convergence test in \d+ of {fits}\b", map_convergence(record))
    # the report lists the random starts of the models with restarts, the chosen one starred
    from reproduce.markdown import fmt
    from reproduce.spirals.report import restarts
    text = restarts(record)
    for model, starts in (("latent_ode_2l", 3), ("latent_ode_extended", 6)):
        for n in (30, 50, 100):
            tr = record["results"]["training"][f"{model}_n{n}_seed0"]
            assert len(tr["start_scores"]) == starts and 0 <= tr["start_chosen"] < starts
            marks = [fmt(v) + ("*" if j == tr["start_chosen"] else "")
                     for j, v in enumerate(tr["start_scores"])]
            assert f"- {SM.LABELS[model]}, n = {n}: seed 0: {', '.join(marks)}\n" in text + "\n"
    from reproduce.spirals.experiment import TRAINING
    listed = {line[2:].split(", n = ")[0] for line in text.splitlines() if line.startswith("- ")}
    assert listed == {SM.LABELS[m] for m in SE.UNIT_MODELS if TRAINING[m].get("starts", 1) > 1}
    # the first stage's time is in its unit's (the one that trains on from it), counted once
    from reproduce.spirals.report import trained_seconds
    tr = record["results"]["training"]
    assert tr["latent_ode_extended_n30_seed0"]["seconds_total"] > tr[
        "latent_ode_gru_n30_seed0"]["seconds_total"]
    assert trained_seconds(record) == pytest.approx(sum(
        v["seconds_total"] for k, v in tr.items() if not k.startswith("latent_ode_gru_")))
    # and the validation RMSE that selected each model's parameters, beside its test RMSE
    from reproduce.spirals.report import selection
    cell = table["RNN + dt"]["50"]
    val = cell["best_validation_rmse_noisy_seeds"]
    from reproduce.common import Checkpoint
    final = Checkpoint(str(tmp_path / "whole_ckpt" / "final" / "rnn_dt_n50_seed0.ckpt")).load()
    assert val == [final["best"]["score"]] and cell["best_step_seeds"] == [final["best"]["step"]]
    gain = cell["validation_gain_last_quarter_seeds"]
    assert gain == [SE.last_quarter_gain(final)] and gain[0] >= 0
    iters = record["results"]["training"]["rnn_dt_n50_seed0"]["iterations"]
    assert (f"| RNN + dt | 50 | {fmt(val[0])} | {fmt(cell['rmse_noisy'])} | "
            f"{final['best']['step']} of {iters} | {gain[0]:.4f} |") in selection(record)
    older = json.loads(json.dumps(record))  # a record from before the column: none shown
    for cells in older["results"]["table2_rmse"].values():
        for c in cells.values():
            c.pop("validation_gain_last_quarter_seeds", None)
    assert "last quarter" not in selection(older) and (
        f"{final['best']['step']} of {iters} |\n") in selection(older)
    assert "z0 by MAP" not in selection(record)
    for model in SM.MODELS:  # every model and n, a latent one's from its own final weights
        assert all(f"| {SM.LABELS[model]} | {n} |" in selection(record) for n in (30, 50, 100))
    gru = table[SM.LABELS["latent_ode_gru"]]["100"]
    final = Checkpoint(str(tmp_path / "whole_ckpt" / "final" / "latent_ode_gru_n100_seed0.ckpt"))
    assert gru["best_validation_rmse_noisy_seeds"] == [final.load()["best"]["score"]]
    for f in ("fig9.png", "fig10.png", "training.png"):
        assert (tmp_path / "whole" / f).stat().st_size > 10_000
    # killed in the middle of the one-layer latent ODE (after 5 + 5 iterations of the RNNs, 6 x 2
    # + 3 of the GRU model and 3 of its warm restart, 3 x 2 + 3 of the two-layer one and 3 of its
    # own; its last checkpoint is at 2), then resumed: validation, learning-rate decay and
    # clipping included
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "split", "--stop-after", "40")
    assert _run(tmp_path, "split", "--resume") == 0
    resumed = json.loads((tmp_path / "split" / "results.json").read_text())
    assert resumed["results"]["table2_rmse"] == table
    losses = {k: v["final_loss"] for k, v in record["results"]["training"].items()}
    assert {k: v["final_loss"] for k, v in resumed["results"]["training"].items()} == losses


@pytest.mark.slow
def test_inference_gap_fits_z0_per_test_spiral_and_leaves_table2_alone(tmp_path):
    assert _run(tmp_path, "g", "--inference-gap", "--seeds", "0", "1") == 0
    results = json.loads((tmp_path / "g" / "results.json").read_text())
    table = results["results"]["table2_rmse"]
    record = json.loads((tmp_path / "g" / "inference_gap.json").read_text())
    # results.json is written last: its duration (the README's) is the whole command's, fits too
    assert results["date"] >= record["date"] and results["duration_s"] >= record["duration_s"]
    assert "--inference-gap" in record["command"] and "fits" in record["choices"]
    gap = record["results"]["inference_gap"]
    assert set(gap) == {"30", "50", "100"}
    for n, by_start in gap.items():
        assert list(by_start) == ["recognition network", "fitted to the noisy observations",
                                  "fitted to the noise-free window",
                                  "fitted to the noise-free window and extrapolation"]
        # the recognition network's z0 is Table 2's "Latent ODE": its mean, and each seed's
        assert by_start["recognition network"]["rmse_clean"] == pytest.approx(
            table["Latent ODE"][n]["rmse_clean"], rel=1e-9)
        by_seed = record["results"]["by_seed"][n]
        assert list(by_seed) == ["0", "1"]
        for key in ("rmse_clean", "rmse_clean_window"):  # each start's mean over the seeds
            for start, scores in by_start.items():
                assert scores[key] == pytest.approx(np.mean([g[start][key]
                                                             for g in by_seed.values()]))
        for s, seed_gap in by_seed.items():
            assert seed_gap["recognition network"]["rmse_clean"] == pytest.approx(
                table["Latent ODE"][n]["rmse_clean_seeds"][int(s)], rel=1e-9)
            # the last fit minimises the error at every point, from the network's z0
            both = {k: np.hypot(v["rmse_clean"], v["rmse_clean_window"])
                    for k, v in seed_gap.items()}
            assert both["fitted to the noise-free window and extrapolation"] <= (
                both["recognition network"] * (1 + 1e-6))
            assert (seed_gap["fitted to the noise-free window"]["rmse_clean_window"]
                    <= seed_gap["recognition network"]["rmse_clean_window"] * (1 + 1e-6))
        assert [m["unit"] for m in record["results"]["models"][n]] == [
            f"latent_ode_extended_n{n}_seed{s}" for s in (0, 1)]


@pytest.mark.slow
def test_training_split_by_n_then_gathered_gives_the_numbers_of_one_run(tmp_path):
    assert _run(tmp_path, "whole", "--eval-workers", "2") == 0
    table = json.loads((tmp_path / "whole" / "results.json").read_text())["results"]["table2_rmse"]
    assert _run(tmp_path, "byn", "--resume", "--train-only-n", "100") == 0
    assert not (tmp_path / "byn" / "results.json").exists()
    assert sorted(p.name for p in (tmp_path / "byn_ckpt").iterdir() if p.is_file()) == sorted(
        f"{m}_n100_seed0{start}.{ext}" for m, start in [
            ("latent_ode", ""), ("latent_ode_elbo", ""), ("rnn_dt", ""), ("rnn", "")]
        + [("latent_ode_2l", s) for s in ("", "_start0", "_start1", "_start2")]
        + [("latent_ode_gru", s) for s in ["", *(f"_start{j}" for j in range(6))]]
        + [("latent_ode_extended", "")]
        for ext in ("ckpt", "log.jsonl"))
    assert _run(tmp_path, "byn", "--resume", "--only", "latent_ode_n30_seed0",
                "latent_ode_n50_seed0") == 0
    assert not (tmp_path / "byn" / "results.json").exists()
    assert _run(tmp_path, "byn", "--resume", "--train-only-n", "30", "50") == 0
    assert _run(tmp_path, "byn", "--resume") == 0
    gathered = json.loads((tmp_path / "byn" / "results.json").read_text())["results"]
    assert gathered["table2_rmse"] == table
    # the finished models' final weights alone give the table back
    import shutil
    for path in (tmp_path / "byn_ckpt").iterdir():
        if path.is_file():
            path.unlink()
    shutil.rmtree(tmp_path / "byn")
    assert _run(tmp_path, "byn", "--evaluate-only", "--eval-workers", "1") == 0  # one process
    again = json.loads((tmp_path / "byn" / "results.json").read_text())["results"]
    assert again["table2_rmse"] == table and "note" not in again
    # and a resumed run takes them as finished: nothing is trained again
    assert _run(tmp_path, "byn", "--resume") == 0
    assert not any(p.is_file() for p in (tmp_path / "byn_ckpt").iterdir())
    again = json.loads((tmp_path / "byn" / "results.json").read_text())["results"]
    assert again["table2_rmse"] == table


@pytest.mark.slow
def test_table2_means_only_the_finished_seeds_and_lists_the_others(tmp_path):
    # seed 0: 4 models x 3 n x 5 iterations, the two-layer latent ODE's 3 starts x 2 + 3 and the
    # GRU one's 6 x 2 + 3 and 3 of its warm restart at each n: 141 steps; then RNN n = 30 seed 1
    # finishes (146) and RNN + dt n = 30 seed 1 is killed after 2 more (its checkpoint at step 2)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "p", "--seeds", "0", "1", "--stop-after", "148")
    assert _run(tmp_path, "p", "--seeds", "0", "1", "--resume", "--evaluate-only") == 0
    record = json.loads((tmp_path / "p" / "results.json").read_text())["results"]
    table = record["table2_rmse"]
    assert table["RNN"]["30"]["seeds"] == [0, 1] and "unfinished_seeds" not in table["RNN"]["30"]
    dt = table["RNN + dt"]["30"]
    assert dt["seeds"] == [0] and len(dt["rmse_clean_by_horizon_seeds"]) == 1
    assert dt["unfinished_seeds"]["1"]["iterations"] == 2 and dt["unfinished_seeds"]["1"]["of"] == 5
    assert dt["rmse_clean"] != dt["unfinished_seeds"]["1"]["rmse_clean"]
    fed = table[SM.TRUE_GAPS_LABEL]["30"]  # the same units' other row: the same seeds
    assert fed["seeds"] == [0] and fed["unfinished_seeds"]["1"]["iterations"] == 2
    assert fed["rmse_clean"] != dt["rmse_clean"] and fed["best_step_seeds"] == dt["best_step_seeds"]
    assert table["Latent ODE"]["100"]["unfinished_seeds"]["1"]["iterations"] == 0  # not started
    assert table[SM.LABELS["latent_ode_elbo"]]["30"]["seeds"] == [0]  # one seed by design
    assert "rnn_dt_n30_seed1 2 of 5" in record["note"]
    from reproduce.spirals.report import unfinished_note
    assert unfinished_note(dt) == "; 1 of 2 seeds finished"
    assert unfinished_note(table["RNN"]["30"]) == ""
    from reproduce.markdown import fmt
    from reproduce.spirals.report import table2
    dt_cell = fmt(dt["rmse_clean"])  # one finished seed: no sd
    assert f"| {dt_cell} ({fmt(dt['rmse_noisy'])}); 1 of 2 seeds finished |" in table2(
        {"results": record})
    compact = table2({"results": record}, compact=True)
    assert f"| {dt_cell}* |" in compact and "(" not in compact.split("| RNN (published")[0]
    # seed 1 alone: no seed of the RNN + dt finished, the partly trained one is averaged
    assert _run(tmp_path, "p", "--seeds", "1", "--resume", "--evaluate-only",
                "--out", str(tmp_path / "p1")) == 0
    table = json.loads((tmp_path / "p1" / "results.json").read_text())["results"]["table2_rmse"]
    assert table["RNN"]["30"]["seeds"] == [1] and "unfinished_seeds" not in table["RNN"]["30"]
    dt1 = table["RNN + dt"]["30"]
    assert dt1["seeds"] == [1] and dt1["rmse_clean"] == dt["unfinished_seeds"]["1"]["rmse_clean"]
    assert unfinished_note(dt1) == "; no seed finished: 2 of 5 iterations"


@pytest.mark.slow
def test_a_pilot_trains_its_own_unit_from_table2s_draws_and_leaves_table2_alone(
        tmp_path, monkeypatch, capsys):
    from reproduce.common import Checkpoint, CheckpointError
    from reproduce.spirals import experiment as SE
    from reproduce.spirals.report import pilots
    # a "pilot" that changes nothing must retrace Table 2's unit of its seed and n exactly
    monkeypatch.setitem(SE.PILOTS, "unchanged", {"overrides": {"encode_cut": 0.5},
                                                 "about": "Table 2's settings",
                                                 "shares": "every draw"})
    # and a pilot with the GRU model's changes is that model's unit, to the last digit
    monkeypatch.setitem(SE.PILOTS, "six_starts", {"model": "latent_ode_2l",
                                                  "overrides": {"encoder": "gru", "starts": 6},
                                                  "about": "the GRU model's", "shares": "all"})
    monkeypatch.setitem(SE.PILOTS, "unchanged_2l", {"model": "latent_ode_2l",
                                                    "overrides": {"encode_cut": 0.5},
                                                    "about": "Table 2's settings",
                                                    "shares": "every draw"})
    assert _run(tmp_path, "g", "--seeds", "0", "1") == 0
    before = (tmp_path / "g" / "results.json").read_text()
    table = json.loads(before)["results"]["table2_rmse"]
    assert _run(tmp_path, "g", "--resume", "--pilot", "unchanged", "two_layer_dynamics",
                "unchanged_2l", "gru_encoder", "six_starts") == 0
    assert (tmp_path / "g" / "results.json").read_text() == before
    # a pilot of another Table 2 model retraces that model's unit, restarts and all
    same_2l = json.loads((tmp_path / "g" / "pilot_unchanged_2l.json").read_text())["results"]
    label_2l = SM.LABELS["latent_ode_2l"]
    assert same_2l["base"] == label_2l
    assert same_2l["by_n"]["30"]["rmse_clean"] == table[label_2l]["30"]["rmse_clean_seeds"][0]
    assert same_2l["by_n"]["30"]["by_seed"]["0"]["table2_unit"] == "latent_ode_2l_n30_seed0"
    gru = Checkpoint(str(tmp_path / "g_ckpt" / "final" / "pilot_gru_encoder_n30_seed0.ckpt")
                     ).load()
    assert gru["config"]["encoder"] == "gru" and len(gru["starts"]) == 3
    assert {"Wu", "Wr"} <= set(gru["params"]["rec"]) and gru["params"]["dyn"]["W3"].shape == (20, 4)
    # Table 2's GRU model has 6 starts, the first three gru_encoder's to the last digit; a pilot
    # with its settings trains its units exactly (so that such a pilot's units can be promoted)
    final = tmp_path / "g_ckpt" / "final"
    six = Checkpoint(str(final / "latent_ode_gru_n30_seed0.ckpt")).load()
    assert [s["start"] for s in six["starts"]] == list(range(6)) and six["config"]["starts"] == 6
    assert six["starts"][:3] == gru["starts"] and six["config"]["encoder"] == "gru"
    pilot_six = Checkpoint(str(final / "pilot_six_starts_n30_seed0.ckpt")).load()
    assert pilot_six["config"] == dict(six["config"], model="pilot_six_starts_n30_seed0")
    assert pilot_six["starts"] == six["starts"]
    assert all(np.array_equal(pilot_six["params"][g][k], six["params"][g][k])
               for g in six["params"] for k in six["params"][g])
    # each start draws the vanilla RNN's weights of the same start of Table 2's unit
    from reproduce.common import model_rng
    for j, suffix in enumerate(["", "_start1", "_start2"]):
        rng = model_rng(0, "latent_ode_2l_n30_seed0" + suffix)
        vanilla = SM.init_latent_ode(rng, [20, 20])["rec"]
        rng = model_rng(0, "latent_ode_2l_n30_seed0" + suffix)
        gated = SM.init_latent_ode(rng, [20, 20], "gru")["rec"]
        assert all(np.array_equal(vanilla[k], gated[k]) for k in vanilla) and "Wu" in gated
    same = json.loads((tmp_path / "g" / "pilot_unchanged.json").read_text())["results"]
    assert list(same["by_n"]) == ["30"]
    cell = same["by_n"]["30"]
    r = cell["by_seed"]["0"]
    assert cell["seeds"] == [0] and list(cell["by_seed"]) == ["0"]
    assert r["unit"] == "pilot_unchanged_n30_seed0" and r["iterations"] == r["of"] == 5
    one_layer = SM.LABELS["latent_ode"]  # the model the "unchanged" pilot changes
    assert r["rmse_clean"] == cell["rmse_clean"] == table[one_layer]["30"]["rmse_clean_seeds"][0]
    assert r["inference_gap"]["recognition network"]["rmse_clean"] == pytest.approx(
        r["rmse_clean"], rel=1e-9)
    assert cell["inference_gap"] == r["inference_gap"]  # the mean over one seed
    deep = json.loads((tmp_path / "g" / "pilot_two_layer_dynamics.json").read_text())
    assert deep["results"]["overrides"] == {"dyn_hidden": [20, 20]}
    final = Checkpoint(str(tmp_path / "g_ckpt" / "final" / "pilot_two_layer_dynamics_n30_seed0"
                           ".ckpt")).load()
    assert final["step"] == 5 and final["config"]["dyn_hidden"] == [20, 20]
    dyn = final["params"]["dyn"]
    assert [dyn[k].shape for k in ("W1", "W2", "W3")] == [(4, 20), (20, 20), (20, 4)]
    # the report shows each pilot beside Table 2's unit of the same seed
    record = dict(json.loads(before), folder=str(tmp_path / "g"))
    text = pilots(record)
    assert "two_layer_dynamics" in text and "unchanged" in text
    assert f'unchanged_2l, a change to Table 2\'s "{label_2l}":' in text
    # and each start's validation score of a pilot with restarts, the chosen one starred
    tr = same_2l["by_n"]["30"]["by_seed"]["0"]["training"]
    marks = [f"{v:.3f}" + ("*" if j == tr["start_chosen"] else "")
             for j, v in enumerate(tr["start_scores"])]
    assert len(marks) == 3 and f"- unchanged_2l, n = 30: seed 0: {', '.join(marks)}" in text
    assert "- unchanged, n = 30" not in text
    x2l, c2l = same_2l["by_n"]["30"]["rmse_clean"], same_2l["by_n"]["30"]
    assert (f"| unchanged_2l | 30 | 0 | 5 | {x2l:.3f} ({c2l['rmse_noisy']:.3f}) | {x2l:.3f} | "
            f"{c2l['map_z0']['rmse_clean']:.3f} | {x2l:.3f} ({x2l:.3f}) |") in text
    x, noisy, by_map = r["rmse_clean"], r["rmse_noisy"], same["by_n"]["30"]["map_z0"]["rmse_clean"]
    assert by_map == table[f"{one_layer}, z0 by MAP"]["30"]["rmse_clean_seeds"][0] != x
    assert (f"| unchanged | 30 | 0 | 5 | {x:.3f} ({noisy:.3f}) | {x:.3f} | {by_map:.3f} | "
            f"{x:.3f} ({x:.3f}) |") in text
    assert r["last_iterate"]["rmse_clean"] > 0
    # a second seed trained alone (--seeds) joins the first seed's scores in the record, which
    # keeps them (the weights they scored unchanged); evaluated by default beside the first, the
    # unchanged pilot's cell is Table 2's cell of the same two seeds, mean, sd and all
    first = json.loads((tmp_path / "g" / "pilot_unchanged.json").read_text())
    assert first["results"]["by_n"]["30"]["by_seed"]["0"]["weights_sha256"] == Checkpoint(
        str(tmp_path / "g_ckpt" / "final" / "pilot_unchanged_n30_seed0.ckpt")).digest()
    assert _run(tmp_path, "g", "--resume", "--pilot", "unchanged", "--seeds", "1") == 0
    both = json.loads((tmp_path / "g" / "pilot_unchanged.json").read_text())["results"]
    assert both["by_n"]["30"]["seeds"] == [0, 1]
    assert both["by_n"]["30"]["by_seed"]["0"] == first["results"]["by_n"]["30"]["by_seed"]["0"]
    assert both["by_n"]["30"]["by_seed"]["1"]["scored"]["command"].endswith("--seeds 1")
    assert _run(tmp_path, "g", "--resume", "--evaluate-only", "--pilot", "unchanged") == 0
    cell = json.loads((tmp_path / "g" / "pilot_unchanged.json").read_text())["results"][
        "by_n"]["30"]
    assert cell == dict(both["by_n"]["30"], by_seed=cell["by_seed"])  # scored again: the same
    t2 = table[one_layer]["30"]
    assert cell["seeds"] == t2["seeds"] == [0, 1] and list(cell["by_seed"]) == ["0", "1"]
    for key in ("rmse_clean", "rmse_clean_sd", "rmse_clean_seeds", "rmse_noisy"):
        assert cell[key] == t2[key], key
    gaps = [cell["by_seed"][s]["inference_gap"]["fitted to the noise-free window"]["rmse_clean"]
            for s in ("0", "1")]
    assert cell["inference_gap"]["fitted to the noise-free window"]["rmse_clean"] == (
        pytest.approx(sum(gaps) / 2, rel=1e-12))
    text = pilots(record)
    m, sd, (a, b) = cell["rmse_clean"], cell["rmse_clean_sd"], cell["rmse_clean_seeds"]
    assert (f"| unchanged | 30 | 0 1 | 5 | {m:.3f} ± {sd:.3f} ({cell['rmse_noisy']:.3f}) | "
            f"{a:.3f}, {b:.3f} | {cell['map_z0']['rmse_clean']:.3f} | "
            f"{(a + b) / 2:.3f} ({a:.3f}, {b:.3f}) |") in text
    # the seeds' spread quoted beside the pilots is the record's, not a number in the code
    assert (f"sample sd of {t2['rmse_clean_sd']:.3f} (\"{one_layer}\", "
            "n = 30)" in text)
    # a run at another n keeps n = 30, and the report names both commands that scored it
    record_path = tmp_path / "g" / "pilot_unchanged.json"
    assert _run(tmp_path, "g", "--resume", "--pilot", "unchanged", "--train-only-n", "50",
                "--seeds", "0") == 0
    by_n = json.loads(record_path.read_text())["results"]["by_n"]
    assert list(by_n) == ["30", "50"] and by_n["30"]["by_seed"] == cell["by_seed"]
    text = pilots(record)
    assert ("--evaluate-only --pilot unchanged`" in text
            and "--pilot unchanged --train-only-n 50 --seeds 0`" in text)

    def again():  # n = 50 seed 0 scored again: what is kept of n = 30, and what is said
        capsys.readouterr()
        assert _run(tmp_path, "g", "--resume", "--evaluate-only", "--pilot", "unchanged",
                    "--train-only-n", "50", "--seeds", "0") == 0
        return (json.loads(record_path.read_text())["results"]["by_n"],
                capsys.readouterr().out)

    # a seed whose weights changed since is dropped, and why is said
    weights = Checkpoint(str(tmp_path / "g_ckpt" / "final" / "pilot_unchanged_n30_seed1.ckpt"))
    changed = weights.load(force=True)
    changed["best"]["params"]["dyn"]["W1"] = changed["best"]["params"]["dyn"]["W1"] + 1e-3
    weights.save(changed)
    by_n, said = again()
    assert ("n = 30 seed 1 scored earlier is dropped (pilot_unchanged_n30_seed1's final weights "
            "are not the ones it scored)") in said
    assert by_n["30"]["seeds"] == [0] and list(by_n["30"]["by_seed"]) == ["0"]
    assert by_n["30"]["rmse_clean"] == cell["rmse_clean_seeds"][0]
    # a finished checkpoint that is not its final weights: scored, but with no digest to keep
    ckpt = Checkpoint(str(tmp_path / "g_ckpt" / "pilot_unchanged_n30_seed1.ckpt"))
    assert ckpt.load(force=True)["step"] == 5
    assert _run(tmp_path, "g", "--resume", "--evaluate-only", "--pilot", "unchanged",
                "--seeds", "1") == 0
    by_n = json.loads(record_path.read_text())["results"]["by_n"]
    assert by_n["30"]["by_seed"]["1"]["weights_sha256"] is None
    assert by_n["30"]["by_seed"]["1"]["rmse_clean"] == cell["rmse_clean_seeds"][1]
    by_n, said = again()
    assert "n = 30 seed 1 scored earlier is dropped (it had" not in said
    assert "n = 30 seed 1 scored earlier is dropped (no digest of final weights" in said
    # an entry from before the digests is dropped, as is a record of other settings
    older = json.loads(record_path.read_text())
    del older["results"]["by_n"]["30"]["by_seed"]["0"]["weights_sha256"]
    record_path.write_text(json.dumps(older))
    by_n, said = again()
    assert "n = 30 seed 0 scored earlier is dropped (no digest of final weights" in said
    assert list(by_n) == ["50"]
    assert _run(tmp_path, "g", "--resume", "--pilot", "unchanged", "--seeds", "0") == 0
    other = json.loads(record_path.read_text())
    assert list(other["results"]["by_n"]) == ["30", "50"]
    other["config"]["tol"] = 1e-3
    record_path.write_text(json.dumps(other))
    by_n, said = again()
    assert "made with other settings (tol)" in said and list(by_n) == ["50"]
    other["config"]["tol"] = None
    other["choices"]["training"] += " and more"
    record_path.write_text(json.dumps(other))
    by_n, said = again()
    assert "made with other settings (training)" in said and list(by_n) == ["50"]
    # a pilot's checkpoint refuses other settings, its architecture included
    monkeypatch.setitem(SE.PILOTS, "two_layer_dynamics", {"overrides": {"dyn_hidden": [20, 9]},
                                                          "about": "changed", "shares": "some"})
    with pytest.raises(CheckpointError, match="dyn_hidden"):
        _run(tmp_path, "g", "--resume", "--pilot", "two_layer_dynamics")
    # a pilot with nothing trained is refused, not scored untrained; --pilot takes no --only
    fresh = ["--smoke", "--out", str(tmp_path / "fresh"), "--checkpoint-dir",
             str(tmp_path / "fresh_ckpt"), "--evaluate-only", "--pilot", "encode_cut_0.2"]
    with pytest.raises(SystemExit) as err:
        S.main(fresh)
    assert err.value.code == 2 and not (tmp_path / "fresh" / "pilot_encode_cut_0.2.json").exists()
    with pytest.raises(SystemExit) as err:
        _run(tmp_path, "g", "--pilot", "unchanged", "--only", "latent_ode_n30_seed0")
    assert err.value.code == 2


def test_a_pilot_seed_still_in_its_restarts_is_found_on_resume(tmp_path):
    from types import SimpleNamespace

    from reproduce.spirals import experiment as SE
    ckpt, weights = tmp_path / "ckpt", tmp_path / "weights"
    ckpt.mkdir()
    weights.mkdir()
    for name in ("pilot_gru_encoder_n30_seed2_start1.ckpt", "pilot_gru_encoder_n50_seed4.ckpt",
                 "pilot_gru_encoder_n30_seed3.log.jsonl", "pilot_gru_encoder_n30_seed1x.ckpt",
                 "latent_ode_2l_n30_seed5_start0.ckpt"):
        (ckpt / name).write_text("")
    (weights / "pilot_gru_encoder_n30_seed6.ckpt").write_text("")
    run = SimpleNamespace(args=SimpleNamespace(seeds=None), seed=0, ckpt_dir=str(ckpt),
                          weights_dir=str(weights), pick=lambda smoke, quick, full: smoke)
    assert SE._pilot_seeds(run, "gru_encoder", 30) == [0, 2, 6]
    assert SE._pilot_seeds(run, "gru_encoder", 50) == [0, 4]


def test_map_z0_is_the_posterior_mode_between_the_data_and_the_prior():
    rng = np.random.RandomState(4)
    params = SM.init_latent_ode(rng, [SM.HIDDEN_MLP, SM.HIDDEN_MLP])
    t = np.linspace(0.0, 1.5, 40)
    z_true = rng.randn(4, SM.LATENT)
    index = np.stack([np.sort(rng.choice(len(t), 15, replace=False)) for _ in range(4)])
    target = SM.decode(params, z_true, t, TIGHT)[0][np.arange(4)[:, None], index]
    start = z_true + 0.1 * rng.randn(*z_true.shape)
    solver = dict(method="adams", rtol=1e-8, atol=1e-8)

    def misfit(z0):
        path = SM.decode(params, z0, t, TIGHT)[0][np.arange(4)[:, None], index]
        return np.sum((path - target) ** 2)

    def neg_log_post(z0, noise_std):
        return misfit(z0) / (2 * noise_std ** 2) + 0.5 * np.sum(z0 ** 2)

    # little noise: the decoded path goes through the data (a 2-d path need not pin a 4-d z0)
    sharp = SM.fit_z0(params, start, t, index, target, solver, 300, noise_std=1e-2)
    assert misfit(sharp) < 1e-2 * misfit(start)
    # much noise: the prior wins, z0 shrinks to its mean 0
    vague = SM.fit_z0(params, start, t, index, target, solver, 300, noise_std=1e3)
    assert np.max(np.abs(vague)) < 1e-3
    # in between: a stationary point of the negative log posterior that beats its start
    info = {}
    mid = SM.fit_z0(params, start, t, index, target, solver, 300, noise_std=0.3, info=info)
    assert neg_log_post(mid, 0.3) < neg_log_post(start, 0.3)
    g = grad(lambda z: neg_log_post(z, 0.3))(mid)
    assert np.max(np.abs(g)) < 3e-2 * np.max(np.abs(grad(lambda z: neg_log_post(z, 0.3))(start)))
    # info: how L-BFGS stopped (converged here; not after a single iteration, whose gradient
    # is still far from 0)
    assert info["converged"] and 0 < info["iterations"] <= info["maxiter"] == 300
    capped = {}
    SM.fit_z0(params, start, t, index, target, solver, 1, noise_std=0.3, info=capped)
    assert not capped["converged"] and capped["iterations"] == 1
    assert capped["max_abs_gradient"] > info["max_abs_gradient"]
    assert misfit(sharp) < misfit(mid) < misfit(vague)
    assert np.sum(vague ** 2) < np.sum(mid ** 2) < np.sum(sharp ** 2)  # the prior's pull


def test_restarts_go_on_with_the_start_that_validates_best_and_resume_exactly(tmp_path):
    from reproduce.common import Run
    from reproduce.latent import train
    target = np.array([1.0, -2.0, 0.5])

    def loss_and_grad(p, rng, stats):
        noise = 0.1 * rng.randn(3)  # uses the unit's generator, as minibatches do
        return float(np.sum((p["w"] - target) ** 2)), {"w": 2 * (p["w"] - target) + noise}

    def validate(p):  # not the training loss: the choice must follow validation
        return float(np.sum((p["w"] + target) ** 2))

    def go(folder, key="toy", *flags, **kw):
        run = Run("toy", ["--smoke", "--checkpoint-dir", str(tmp_path / folder), *flags])
        kw = dict(dict(starts=3, start_iters=4), **kw)
        return train(run, key, lambda rng: {"w": 3 * rng.randn(3)}, loss_and_grad, 10, 0.05, 2,
                     validate=validate, validate_every=2, **kw)

    state = go("a")
    scores = [s["validation_score"] for s in state["starts"]]
    assert [s["start"] for s in state["starts"]] == [0, 1, 2] and len(set(scores)) == 3
    assert all(s["step"] == 4 for s in state["starts"])
    # each start is the plain run of its own draws, stopped at start_iters
    plain = [go("plain", f"plain{j}", rng_key="toy" + ("" if j == 0 else f"_start{j}"),
                starts=1) for j in range(3)]
    for j, p in enumerate(plain):
        assert [v["score"] for v in p["validation"] if v["step"] == 4] == [scores[j]]
    best = int(np.argmin(scores))
    assert best != int(np.argmin([p["history"]["loss"][3] for p in plain]))
    np.testing.assert_array_equal(state["params"]["w"], plain[best]["params"]["w"])
    from reproduce.latent import training_summary
    summary = training_summary(state)  # the dropped starts' steps count in the time per step
    assert summary["start_chosen"] == best and summary["restart_iterations"] == 8
    assert summary["start_scores"] == scores
    assert summary["seconds_per_iteration"] == pytest.approx(state["seconds"] / 18)
    assert state["step"] == 10 and len(state["history"]["loss"]) == 10
    assert state["history"]["loss"] == plain[best]["history"]["loss"]
    # killed inside the second start, then inside the main unit: resumed to the same numbers
    for stop in ("6", "9"):  # ticks of each process: the second kill is 3 steps into the main
        with pytest.raises(KeyboardInterrupt):
            go("b", "toy", "--resume", "--stop-after", stop)
    from reproduce.common import Checkpoint
    assert Checkpoint(str(tmp_path / "b" / "toy.ckpt")).load()["step"] == 6
    resumed = go("b", "toy", "--resume")
    np.testing.assert_array_equal(resumed["params"]["w"], state["params"]["w"])
    assert resumed["starts"] == state["starts"]
    assert resumed["history"]["loss"] == state["history"]["loss"]
    # killed one step into the main unit, before its first checkpoint: the same numbers too
    with pytest.raises(KeyboardInterrupt):
        go("d", "toy", "--resume", "--stop-after", "13")
    assert Checkpoint(str(tmp_path / "d" / "toy.ckpt")).load() is None
    resumed = go("d", "toy", "--resume")
    np.testing.assert_array_equal(resumed["params"]["w"], state["params"]["w"])
    assert resumed["history"]["loss"] == state["history"]["loss"]
    with pytest.raises(ValueError, match="start_iters"):
        go("c", start_iters=10)


def test_map_convergence_counts_the_fits_and_names_how_the_others_stopped():
    from reproduce.spirals.report import map_convergence

    def fit(converged, iterations, message):
        return dict(converged=converged, iterations=iterations, message=message,
                    max_abs_gradient=float(iterations))

    cells = {"30": {"lbfgs_seeds": [fit(True, 200, "CONVERGENCE: REL"),
                                    fit(False, 274, "ABNORMAL: ")]},
             "50": {"lbfgs_seeds": [fit(False, 1000, "STOP: TOTAL NO. OF ITERATIONS")]},
             "100": {}}
    text = map_convergence({"results": {"table2_rmse": {"Latent ODE": cells}}})
    assert "convergence test in 1 of 3; the others stopped with 'ABNORMAL' (its line search " \
           "failed); 'STOP: TOTAL NO. OF ITERATIONS' after 274-1000 iterations" in text
    assert text.endswith("largest |gradient| entry 1,000.")
    assert map_convergence({"results": {"table2_rmse": {"RNN": {"30": {}}}}}) == ""



def test_an_rnn_pilot_retraces_table2s_unit_and_stretches_its_schedule(tmp_path, monkeypatch):
    from reproduce.common import Checkpoint
    from reproduce.spirals import experiment as SE
    from reproduce.spirals.report import pilots
    monkeypatch.setitem(SE.PILOTS, "unchanged_dt", {"model": "rnn_dt", "overrides": {},
                                                    "about": "Table 2's settings",
                                                    "shares": "every draw"})
    monkeypatch.setitem(SE.PILOTS, "twice_dt", {"model": "rnn_dt",
                                                "overrides": {"iters_factor": 2},
                                                "about": "twice", "shares": "every draw"})
    assert _run(tmp_path, "g", "--train-only", "rnn_dt", "--train-only-n", "30") == 0
    assert _run(tmp_path, "g", "--resume", "--pilot", "unchanged_dt", "twice_dt",
                "rnn_dt_third_iterations", "rnn_dt_lr_0.03", "rnn_dt_lr_0.03_full") == 0
    final = tmp_path / "g_ckpt" / "final"
    table2 = Checkpoint(str(final / "rnn_dt_n30_seed0.ckpt")).load()
    same = Checkpoint(str(final / "pilot_unchanged_dt_n30_seed0.ckpt")).load()
    assert same["config"] == dict(table2["config"], model="pilot_unchanged_dt_n30_seed0")
    assert all(np.array_equal(same["params"][k], table2["params"][k]) for k in table2["params"])
    iters = SE.SETTINGS["smoke"]["iters"]["rnn_dt"]
    assert table2["step"] == iters
    # iters_factor sets the iterations (the learning rate decays over them), and only n_iters
    # says so in the checkpoint's configuration
    for name, factor in (("twice_dt", 2), ("rnn_dt_third_iterations", 1 / 3)):
        unit = f"pilot_{name}_n30_seed0"
        ckpt = Checkpoint(str(final / f"{unit}.ckpt")).load()
        assert ckpt["step"] == ckpt["config"]["n_iters"] == round(factor * iters) != iters
        assert ckpt["config"] == dict(table2["config"], model=unit, n_iters=ckpt["step"])
    faster = Checkpoint(str(final / "pilot_rnn_dt_lr_0.03_n30_seed0.ckpt")).load()
    assert (faster["config"]["lr"], faster["config"]["lr_final"]) == (0.03, 0.03 / 100)
    assert faster["step"] == round(iters / 3)
    full = Checkpoint(str(final / "pilot_rnn_dt_lr_0.03_full_n30_seed0.ckpt")).load()
    assert (full["config"]["lr"], full["config"]["lr_final"], full["step"]) == (0.03, 3e-4, iters)
    assert full["config"] == dict(table2["config"], model="pilot_rnn_dt_lr_0.03_full_n30_seed0",
                                  lr=0.03, lr_final=3e-4)
    out = json.loads((tmp_path / "g" / "pilot_twice_dt.json").read_text())
    cell = out["results"]["by_n"]["30"]
    assert cell["by_seed"]["0"]["of"] == 2 * iters and "inference_gap" not in cell
    assert "map_z0" not in cell and "fits" not in out["choices"]
    assert out["choices"]["training"].endswith(f"'iterations': {2 * iters}}}")
    # the report shows an RNN pilot beside its Table 2 unit, with no latent ODE columns
    x = json.loads((tmp_path / "g" / "pilot_unchanged_dt.json").read_text())["results"][
        "by_n"]["30"]["rmse_clean"]
    text = pilots({"folder": str(tmp_path / "g"), "results": {"table2_rmse": {
        "RNN + dt": {"30": {"seeds": [0], "rmse_clean_seeds": [x], "rmse_clean": x}}}}})
    assert f"| unchanged_dt | 30 | 0 | 5 | {x:.3f} (" in text
    assert f"| {x:.3f} | - | {x:.3f} ({x:.3f}) | - | - | - |" in text


def test_rnn_pilots_keep_their_lengths_when_table2s_change():
    # an RNN pilot's length is a multiple of the mode's rnn_pilot_iters, not of Table 2's
    # iterations; a latent ODE pilot's is Table 2's
    cfg = {"iters": {"rnn": 18000, "rnn_dt": 18000, "latent_ode": 20000}, "rnn_pilot_iters": 9000}
    assert SE.iterations(cfg, "rnn_dt") == 18000
    assert SE.iterations(cfg, "rnn_dt", "rnn_dt_twice_iterations") == 18000
    assert SE.iterations(cfg, "rnn_dt", "rnn_dt_third_iterations") == 3000
    assert SE.iterations(cfg, "rnn_dt", "rnn_dt_four_times_iterations") == 36000
    assert SE.iterations(cfg, "rnn", "rnn_base_iterations") == 9000
    assert SE.iterations(cfg, "rnn_dt", "rnn_dt_lr_0.03_full") == 9000
    assert SE.iterations(cfg, "latent_ode", "encode_cut_0.2") == 20000


def test_rnn_training_choice_holds_for_the_committed_results():
    # CHOICES["RNN training"] states how the committed runs compare: each claim against the
    # committed results.json and pilot JSONs, so the prose cannot outlive the numbers
    from reproduce.spirals import report  # published numbers only through a report module
    folder = os.path.join(os.path.dirname(SE.__file__), "..", "..", "figures", "spirals")

    def cells(name):
        with open(os.path.join(folder, name)) as f:
            results = json.load(f)["results"]
        return results["by_n"] if "by_n" in results else results["table2_rmse"]

    table2 = cells("results.json")
    rnn, dt, ode, first = (table2[label] for label in (
        "RNN", "RNN + dt", "Latent ODE", SM.LABELS["latent_ode_gru"]))
    base = cells("pilot_rnn_base_iterations.json")
    for n in ("50", "100"):  # longer training did better at n = 50 and 100
        assert rnn[n]["rmse_clean"] < base[n]["rmse_clean"]
    assert rnn["30"]["rmse_clean"] >= base["30"]["rmse_clean"]  # not at n = 30
    # the levelling off is n = 30's: at n = 100 the RNN units' last quarter gained several
    # (here: at least 3) times as much on average
    gains = {n: [g for row in (rnn, dt) for g in row[n]["validation_gain_last_quarter_seeds"]]
             for n in ("30", "100")}
    assert np.mean(gains["100"]) > 3 * np.mean(gains["30"])
    third = cells("pilot_rnn_dt_third_iterations.json")["30"]["rmse_clean"]
    assert report.published.TABLE2["rnn"][30] > third
    text = SE.CHOICES["RNN training"]
    assert "at n = 30 it levels off" in text and "at n = 100 the RNN units' last quarter " \
        "lowered their best validation RMSE several times as much as at n = 30" in text
    assert "not at n = 30" in text and "with our Latent ODE, see the comparisons under Table 2" in text
    # how the two compare is worded from the numbers (report.targets), not in the choices
    assert not re.search(r"(below|above) (it|our Latent ODE) at n =", text)
    # CHOICES["latent ODE training"]: the first stage had not converged (most of its units
    # selected a check in their last quarter), the warm restart lowered the mean at each n,
    # n = 50 seed 0 kept its step-7250 check, and most units again selected a check in their
    # last quarter
    full = SE.SETTINGS["full"]["iters"]
    for cell, planned in ((first, full["latent_ode_gru"]), (ode, full[SM.LATENT_ODE])):
        late = [s > SE.LAST_QUARTER * planned for n in ("30", "50", "100")
                for s in cell[n]["best_step_seeds"]]
        assert len(late) == 3 * len(SE.FULL_SEEDS) and sum(late) > len(late) / 2
    assert all(first[n]["rmse_clean"] > ode[n]["rmse_clean"] for n in ("30", "50", "100"))
    assert ode["50"]["best_step_seeds"][0] == first["50"]["best_step_seeds"][0] == 7250
    for cell in (ode, first):
        assert all(c["seeds"] == list(SE.FULL_SEEDS) and "unfinished_seeds" not in c
                   for c in cell.values())
    assert all(c["seeds"] == [0, 1, 2] for c in rnn.values())  # the plain RNN: 3 seeds
    assert all(c["seeds"] == list(SE.FULL_SEEDS) and len(c["rmse_clean_seeds"]) == 7
               for c in dt.values())
    text = SE.CHOICES["latent ODE training"]
    for claim in ("selected a check in the last quarter of their run", "lowered the mean RMSE "
                  "at each n", "check of step 7250", "Most of its units again "
                  "selected a check in their last quarter"):
        assert claim in text, claim


def test_every_spirals_weight_matches_the_full_settings():
    # a change of --full's settings without fresh weights would make `--evaluate-only` refuse
    # the units: each unit in weights/spirals names itself, finished what --full now plans for
    # it, and was trained with --full's data and checks and its model's (or pilot's) training
    from reproduce.common import Checkpoint
    from reproduce.latent import carries_on
    folder = os.path.join(os.path.dirname(SE.__file__), "..", "..", "weights", "spirals")
    names = sorted(f[:-len(".ckpt")] for f in os.listdir(folder) if f.endswith(".ckpt"))
    assert len(names) >= 18
    full = SE.SETTINGS["full"]
    for name in names:
        state = Checkpoint(os.path.join(folder, name + ".ckpt")).load()
        model, _, seed = SE.parse_unit_name(name)
        pilot = model.removeprefix("pilot_") if model.startswith("pilot_") else None
        assert pilot is None or pilot in SE.PILOTS, name
        base = SE.PILOTS[pilot].get("model", "latent_ode") if pilot else model
        hyper = dict(SE.TRAINING[base], **(SE.PILOTS[pilot]["overrides"] if pilot else {}))
        expected = dict(mode="full", model=name, seed=seed, n_spirals=full["n_spirals"],
                        validate_every=full["validate_every"],
                        n_iters=SE.iterations(full, base, pilot),
                        **{k: hyper[k] for k in ("lr", "lr_final", "clip", "batch_size")})
        if hyper.get("starts", 1) > 1:
            expected["start_iters"] = full["start_iters"]
        assert {k: state["config"].get(k) for k in expected} == expected, name
        assert state["step"] == expected["n_iters"], name
        assert state["config"].get("extends") == hyper.get("extends"), name
        if "extends" in hyper:  # its first stage is the committed unit it trained on from
            _, n, _ = SE.parse_unit_name(name)
            first = Checkpoint(os.path.join(folder, SE.unit_name(hyper["extends"], n, seed)
                                            + ".ckpt")).load()
            assert carries_on(state, first) and state["starts"] == first["starts"], name


def test_the_report_says_where_map_raises_or_lowers_the_latent_odes_rmse():
    from reproduce.spirals.report import map_effect
    label = SM.LABELS[SM.LATENT_ODE]
    cells = {label: {"30": {"rmse_clean": 0.2}, "50": {"rmse_clean": 0.1}},
             SM.MAP_LABEL.format(label): {"30": {"rmse_clean": 0.15},
                                           "50": {"rmse_clean": 0.125}}}
    text = map_effect({"results": {"table2_rmse": cells}})
    assert (f'lowers the RMSE of "{label}" (0.200 to 0.150 at n = 30) and raises it (0.100 to '
            "0.125 at n = 50)") in text and "extrapolate worse" in text
    cells[SM.MAP_LABEL.format(label)]["50"]["rmse_clean"] = 0.05
    text = map_effect({"results": {"table2_rmse": cells}})
    assert "at n = 30, 0.100 to 0.050 at n = 50)." in text and "raises" not in text
    cells[SM.MAP_LABEL.format(label)]["50"]["rmse_clean"] = 0.1002  # equal as printed
    text = map_effect({"results": {"table2_rmse": cells}})
    assert "and leaves it (0.100 to 0.100 at n = 50)." in text and "worse" not in text
    cells[SM.MAP_LABEL.format(label)] = {"100": {"rmse_clean": 0.1}}  # no n in common
    assert map_effect({"results": {"table2_rmse": cells}}) == ""
    assert map_effect({"results": {"table2_rmse": {label: cells[label]}}}) == ""


def test_the_report_counts_late_checks_restart_gains_and_rnn_gains_from_the_record():
    from reproduce.spirals.report import training_length
    ode, first, dt, rnn = (SM.LABELS[m] for m in (SM.LATENT_ODE, "latent_ode_gru", "rnn_dt",
                                                     "rnn"))
    units = {(ode, SM.LATENT_ODE, 30000), (first, "latent_ode_gru", 20000), (dt, "rnn_dt", 100),
             (rnn, "rnn", 100)}
    # (selected steps, noise-free RMSE) of seeds 0 and 1; a step of exactly 3/4 is not late
    cells = {ode: {"30": ([29000, 22500], [0.10, 0.20]), "50": ([30000, 1], [0.20, 0.30])},
             first: {"30": ([15001, 15000], [0.16, 0.20]), "50": ([20000, 20000], [0.1, 0.3])},
             dt: {"30": ([100, 10], [1, 1]), "100": ([76, 75], [1, 1])},
             rnn: {"30": ([100, 100], [1, 1])}}
    gains = {dt: {"30": [0.002, 0.0], "100": [0.01, 0.02]}, rnn: {"30": [0.007, None]},
             ode: {"30": [0.5, 0.5]}, first: {"50": [0.5, 0.5]}}  # the latent ones not pooled
    table, training = {}, {}
    for label, model, iters in units:
        for n, (steps, rmse) in cells[label].items():
            table.setdefault(label, {})[n] = {
                "seeds": [0, 1], "best_step_seeds": steps, "rmse_clean": np.mean(rmse),
                "rmse_clean_seeds": rmse,
                "validation_gain_last_quarter_seeds": gains.get(label, {}).get(n)}
            training.update({SE.unit_name(model, int(n), s): {"iterations": iters}
                             for s in (0, 1)})
    record = {"results": {"table2_rmse": table, "training": training}}
    text = training_length(record)
    assert (f'stopped): "{rnn}" 2 of 2; "{dt}" 2 of 4; "{ode}" 2 of 4; "{first}" 3 of 4.'
            in text)  # in Table 2's order
    assert (f'("{ode}" against its first stage "{first}", over the seeds both trained) changed '
            "the mean noise-free RMSE by -0.0300 at n = 30 (2 seeds), +0.0500 at n = 50 (2 "
            "seeds).") in text
    assert text.endswith(f'("{rnn}" and "{dt}") lowered their best validation RMSE (noisy) by '
                         "0.0030 on average at n = 30 (3 units, 0.0000 to 0.0070), 0.0150 on "
                         "average at n = 100 (2 units, 0.0100 to 0.0200).")
    for label in (dt, rnn):  # a record from before the gains were kept: no RNN sentence
        for cell in table[label].values():
            cell["validation_gain_last_quarter_seeds"] = None
    assert training_length(record).endswith("+0.0500 at n = 50 (2 seeds).")
    # a seed one stage has not finished: compared over the seeds both hold
    table[first]["50"].update(seeds=[0, 2], rmse_clean_seeds=[0.1, 9.0])
    assert "-0.0300 at n = 30 (2 seeds), +0.1000 at n = 50 (1 seed)." in training_length(record)
    table[ode]["30"]["unfinished_seeds"] = {"0": {"iterations": 0}, "1": {"iterations": 0}}
    text = training_length(record)  # an untrained cell counts nowhere
    assert f'"{ode}" 1 of 2;' in text and "-0.0300" not in text and "+0.1000 at n = 50" in text
    table[dt]["30"]["best_step_seeds"] = [None, 100]  # a unit never validated: not counted
    assert f'"{dt}" 2 of 3;' in training_length(record)
    table[first]["50"].update(seeds=[2, 3])  # no seed both stages hold: no restart sentence
    assert "changed the mean" not in training_length(record)
    assert training_length({"results": {"table2_rmse": {}, "training": {}}}) == ""


def test_the_report_words_table2s_comparisons_from_the_record():
    from reproduce.markdown import fmt
    from reproduce.spirals import report
    from reproduce.spirals.report import targets
    ode = SM.LABELS[SM.LATENT_ODE]
    cells = {ode: {"30": 0.01, "50": 9.0},  # below and above any published number
             "RNN + dt": {"30": 0.2, "50": 0.1}, "RNN": {"30": 3.0, "50": 0.3},
             "Last observation": {"30": 2.0, "50": 2.0}}
    record = {"results": {"table2_rmse": {k: {n: {"rmse_clean": v} for n, v in c.items()}
                                          for k, c in cells.items()}}}
    text = targets(record)
    assert f'"{ode}" below the published one at n = 30 (0.010 against 0.' in text
    assert f'"RNN + dt" below "{ode}" at n = 50 (0.100 against 9) (of 30, 50);' in text
    assert '"RNN" below "Last observation" at n = 50 (0.300 against 2) (of 30, 50);' in text
    assert text.endswith('"RNN + dt" below "Last observation" at n = 30 (0.200 against 2), '
                         "50 (0.100 against 2).")
    cells = record["results"]["table2_rmse"]
    cells["RNN + dt"]["30"]["rmse_clean"] = cells["RNN + dt"]["50"]["rmse_clean"] = 3.0
    assert targets(record).endswith('"RNN + dt" below "Last observation" at no n (of 30, 50).')
    # each comparison over the n both of its rows have
    record["results"]["table2_rmse"]["RNN"]["100"] = {"rmse_clean": 0.1}
    record["results"]["table2_rmse"][ode]["100"] = {"rmse_clean": 0.1}
    text = targets(record)
    assert "published one at n = 30 (0.010 against 0." in text
    assert "100 (0.100 against 0.1" in text and ") (of 30, 50, 100);" in text
    assert '"RNN" below "Last observation" at n = 50 (0.300 against 2) (of 30, 50);' in text
    assert "by (each row" not in text  # no sd in these cells
    for row, sd in ((ode, 0.5), ("RNN + dt", 0.25)):
        for cell in record["results"]["table2_rmse"][row].values():
            cell["rmse_clean_sd"] = sd
    record["results"]["table2_rmse"]["RNN + dt"]["50"]["rmse_clean"] = 0.1
    lead = f'"RNN + dt" below "{ode}" by (each row\'s sd over its seeds): '
    assert targets(record).endswith(lead + "n = 50: 8.900 (sd 0.500 and 0.250).")
    # with each cell's seeds, Welch's test against its closed form (t, Welch-Satterthwaite df)
    x, y = [0.18, 0.16, 0.12, 0.12, 0.11], [0.13, 0.11, 0.12, 0.13, 0.12]
    va, vb = np.var(x, ddof=1) / len(x), np.var(y, ddof=1) / len(y)
    t_stat = (np.mean(x) - np.mean(y)) / np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(x) - 1) + vb ** 2 / (len(y) - 1))
    p = 2 * t_dist.sf(t_stat, df)
    assert 0.05 < p < 0.95  # not a value its rounding could hide
    for row, seeds in ((ode, x), ("RNN + dt", y)):
        cell = record["results"]["table2_rmse"][row]["50"]
        cell.update(rmse_clean=np.mean(seeds), rmse_clean_sd=np.std(seeds, ddof=1),
                    rmse_clean_seeds=seeds)
    assert targets(record).endswith(
        lead + f"n = 50: 0.016 (sd 0.030 and 0.008; p = {p:.2g}).")
    for no_spread in (x[:1], [x[0]] * 3):  # one seed, or seeds all alike: no test
        record["results"]["table2_rmse"][ode]["50"]["rmse_clean_seeds"] = no_spread
        assert targets(record).endswith(lead + "n = 50: 0.016 (sd 0.030 and 0.008).")
    # against a published number: the one-sample test, against its closed form
    published = report.published.TABLE2["latent_ode"][100]
    x = [published - 0.02, published - 0.01, published + 0.005]
    t_stat = (np.mean(x) - published) / (np.std(x, ddof=1) / np.sqrt(len(x)))
    p = 2 * t_dist.cdf(t_stat, len(x) - 1)
    assert 0.05 < p < 0.95
    record["results"]["table2_rmse"][ode]["100"] = {"rmse_clean": np.mean(x),
                                                    "rmse_clean_seeds": x}
    assert f"100 ({fmt(np.mean(x))} against {fmt(published)}; p = {p:.2g})" in targets(record)
    # the paper's model as written beside the published numbers, where the record has it, and
    # why the p-values are no out-of-sample test
    assert "as written" not in targets(record)
    paper = SM.LABELS["latent_ode_elbo"]
    record["results"]["table2_rmse"][paper] = {"30": {"rmse_clean": 0.33, "seeds": [0]}}
    published30 = report.published.TABLE2["latent_ode"][30]
    text = targets(record)
    assert (f'The paper\'s model as written ("{paper}", seed 0 only) scores 0.330 at n = 30 '
            f"({0.33 / published30:.1f} times the published {fmt(published30)});") in text
    assert text.endswith("not an out-of-sample test of those choices.")
    record["results"]["table2_rmse"][paper]["30"]["seeds"] = [0, 1, 2]
    assert f'("{paper}", mean of 3 seeds) scores 0.330' in targets(record)
    del record["results"]["table2_rmse"]["Last observation"]
    assert targets(record) == ""


def test_a_cell_whose_seeds_never_started_is_shown_not_trained():
    from reproduce.spirals.report import table2, targets
    ode = SM.LABELS[SM.LATENT_ODE]
    done = {"seeds": [0], "rmse_clean": 0.2, "rmse_clean_sd": 0.0, "rmse_noisy": 0.4,
            "rmse_clean_seeds": [0.2]}
    fresh = dict(done, rmse_clean=7.5, seeds=[0, 1], rmse_clean_seeds=[7.0, 8.0],
                 unfinished_seeds={"0": {"iterations": 0, "of": 9}, "1": {"iterations": 0,
                                                                         "of": 9}})
    started = dict(fresh, unfinished_seeds={"0": {"iterations": 3, "of": 9},
                                            "1": {"iterations": 0, "of": 9}})
    rows = {"RNN": {"30": fresh, "50": started}, "RNN + dt": {"30": done, "50": done},
            ode: {"30": done, "50": done}, "Last observation": {
                n: {"rmse_clean": 2.0, "rmse_clean_sd": 0.0, "rmse_noisy": 2.1,
                    "rmse_clean_seeds": [2.0]} for n in ("30", "50")}}
    record = {"results": {"table2_rmse": rows}}
    for compact in (False, True):
        text = table2(record, compact)
        assert "| RNN | 2 | not trained | 7.500 ± " in text and "| Last observation | – | 2" in text
    assert '"RNN" below "Last observation" at no n (of 50);' in targets(record)


def test_last_quarter_gain_is_what_the_last_quarter_took_off_the_best_validation_rmse():
    checks = [{"step": s, "score": v} for s, v in ((2, 0.5), (4, 0.4), (6, 0.45), (8, 0.3))]
    state = {"step": 8, "validation": checks, "best": checks[3]}
    assert SE.last_quarter_gain(state) == pytest.approx(0.1)  # 0.4 (step 4) less 0.3 (step 8)
    early = dict(state, validation=checks[:3] + [{"step": 8, "score": 0.42}], best=checks[1])
    assert SE.last_quarter_gain(early) == 0.0  # its best check came before the last quarter
    later = [{"step": s, "score": v} for s, v in ((2, 0.5), (4, 0.45), (6, 0.4))]
    cut = dict(state, step=7, validation=later, best=later[2])  # its quarter: the steps > 5.25
    assert SE.last_quarter_gain(cut) == pytest.approx(0.05)
    assert SE.last_quarter_gain(dict(state, validation=[], best=None)) is None


def test_training_time_counts_a_first_stage_once():
    # a first stage's time is inside the unit that trains on from it; a record without that
    # unit (made before the stage was one) counts the first stage's own
    from reproduce.spirals.report import trained_seconds
    old = {"results": {"training": {"rnn_n30_seed0": {"seconds_total": 2.0},
                                    "latent_ode_gru_n30_seed0": {"seconds_total": 5.0}}}}
    assert trained_seconds(old) == 7.0
    new = {"results": {"training": dict(old["results"]["training"], latent_ode_extended_n30_seed0={
        "seconds_total": 8.0}, latent_ode_gru_n50_seed0={"seconds_total": 1.0})}}
    assert trained_seconds(new) == 11.0


def test_a_pilot_cannot_change_or_make_an_extending_model(tmp_path, monkeypatch):
    for name, pilot in (("of_extended", {"model": SM.LATENT_ODE, "overrides": {}}),
                        ("extending", {"overrides": {"extends": "latent_ode_2l"}})):
        monkeypatch.setitem(SE.PILOTS, name, dict(pilot, about="", shares=""))
        with pytest.raises(ValueError, match=f"pilot {name}: a pilot trains in one stage"):
            _run(tmp_path, name, "--pilot", name)


def test_full_trains_seven_seeds_of_table_2s_key_rows_and_three_of_the_others():
    run = SE.make_run(["--full"])
    counts = collections.Counter(SE.parse_unit_name(u)[0] for u in SE.units(run))
    assert counts == {"rnn": 9, "rnn_dt": 21, "latent_ode": 9, "latent_ode_elbo": 3,
                      "latent_ode_2l": 9, SM.LATENT_ODE: 21}
    for first in SE.FIRST_STAGES:  # a unit trains its first stage for each of its seeds
        for model, training in SE.TRAINING.items():
            if training.get("extends") == first:
                assert SE.TRAINING[first]["seeds"] == training["seeds"], (first, model)


@pytest.mark.slow
def test_the_latent_ode_trains_on_from_its_first_stage_in_one_unit(tmp_path, monkeypatch):
    from reproduce.common import AppendLog, Checkpoint, CheckpointError
    model, first = SM.LATENT_ODE, "latent_ode_gru"
    assert SE.stages(model) == [first, model] and SE.TRAINING[model]["extends"] == first
    iters, total = (SE.SETTINGS["smoke"]["iters"][m] for m in (first, model))
    extra = total - iters
    assert extra > 1
    # the first stage is no unit of its own: two workers never train it side by side
    run = SE.make_run(["--smoke"])
    assert f"{model}_n30_seed0" in SE.units(run) and not any(
        u.startswith(first) for u in SE.units(run))
    for flags in (["--only", f"{first}_n30_seed0"], ["--train-only", first]):
        with pytest.raises(SystemExit) as err:
            _run(tmp_path, "e", *flags)
        assert err.value.code == 2
    # its unit trains the first stage, then trains on from it
    assert _run(tmp_path, "e", "--train-only", model, "--train-only-n", "30") == 0
    final, ckpt = tmp_path / "e_ckpt" / "final", tmp_path / "e_ckpt"
    assert sorted(p.name for p in final.iterdir()) == sorted([f"{first}_n30_seed0.ckpt",
                                                             f"{model}_n30_seed0.ckpt"])
    stage1 = Checkpoint(str(final / f"{first}_n30_seed0.ckpt")).load()
    unit = f"{model}_n30_seed0"
    ext = Checkpoint(str(final / f"{unit}.ckpt")).load()
    assert ext["step"] == ext["config"]["n_iters"] == total and stage1["step"] == iters
    assert ext["config"] == dict(stage1["config"], model=unit, n_iters=total, extends=first)
    # the first stage's run is its first `iters` steps: checks, restarts, curve and time carry on
    assert ext["validation"][:len(stage1["validation"])] == stage1["validation"]
    assert len(ext["validation"]) > len(stage1["validation"]) and ext["starts"] == stage1["starts"]
    assert ext["history"]["loss"][:iters].tolist() == stage1["history"]["loss"].tolist()
    assert len(ext["history"]["loss"]) == total and ext["seconds"] > stage1["seconds"]
    assert ext["best"]["score"] == min(v["score"] for v in ext["validation"])
    # the learning rate runs the last `extra` steps of the first stage's schedule again
    old = [r["lr"] for r in AppendLog(str(ckpt / f"{first}_n30_seed0.log.jsonl")).read()]
    new = [r.get("lr") for r in AppendLog(str(ckpt / f"{unit}.log.jsonl")).read()]
    assert len(old) == iters and new[:iters] == [None] * iters  # the carried curve: loss, NFE
    assert new[iters:] == pytest.approx(old[iters - extra:], rel=1e-12) and len(new) == total
    # its training noise after the first stage comes from its draws' generator, that of the
    # pilot its committed units were trained as (so a fresh run retrains them): another draws
    # gives the same first stage and another second one
    assert SE.unit_name(SE.TRAINING[model]["draws"], 30, 0) == SE.unit_name(
        first, 30, 0, pilot="latent_ode_extended")
    monkeypatch.setitem(SE.TRAINING, model, dict(SE.TRAINING[model], draws="other"))
    assert _run(tmp_path, "d", "--train-only", model, "--train-only-n", "30") == 0
    other = Checkpoint(str(tmp_path / "d_ckpt" / "final" / f"{unit}.ckpt")).load()
    assert other["history"]["loss"][:iters].tolist() == stage1["history"]["loss"].tolist()
    assert other["history"]["loss"][iters:].tolist() != ext["history"]["loss"][iters:].tolist()
    monkeypatch.undo()
    # killed during its second stage, resumed: the same numbers
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "k", "--only", unit, "--stop-after", str(6 * 2 + 3 + 1))
    cut = Checkpoint(str(tmp_path / "k_ckpt" / f"{unit}.ckpt")).load(force=True)
    assert cut["step"] == iters + 1  # resumed from its own checkpoint, inside the extension
    # its first stage's weights changed meanwhile (say, restored from another run; kept only as
    # final weights): refused before a step is trained on
    (tmp_path / "k_ckpt" / f"{first}_n30_seed0.ckpt").unlink()
    source = Checkpoint(str(tmp_path / "k_ckpt" / "final" / f"{first}_n30_seed0.ckpt"))
    kept = source.load()
    source.save(dict(kept, validation=[dict(v, score=v["score"] * (1 + 1e-9))
                                       for v in kept["validation"]]))
    with pytest.raises(CheckpointError, match=f"{first}_n30_seed0, which has changed since"):
        _run(tmp_path, "k", "--resume", "--only", unit)
    assert Checkpoint(str(tmp_path / "k_ckpt" / f"{unit}.ckpt")).load(force=True)["step"] == (
        iters + 1)
    source.save(kept)
    assert _run(tmp_path, "k", "--resume", "--only", unit) == 0
    again = Checkpoint(str(tmp_path / "k_ckpt" / "final" / f"{unit}.ckpt")).load()
    assert all(np.array_equal(again["params"][g][k], ext["params"][g][k])
               for g in ext["params"] for k in ext["params"][g])
    assert again["validation"] == ext["validation"]
    # a first stage made with other settings is refused, as is one that stopped short
    (tmp_path / "k_ckpt" / f"{unit}.ckpt").unlink()
    (tmp_path / "k_ckpt" / "final" / f"{unit}.ckpt").unlink()
    Checkpoint(str(tmp_path / "k_ckpt" / "final" / f"{first}_n30_seed0.ckpt")).save(
        dict(stage1, config=dict(stage1["config"], lr=0.5)))
    with pytest.raises(CheckpointError, match="lr"):  # refused by the first stage's own load
        _run(tmp_path, "k", "--resume", "--only", unit)

    def second_stage_alone():  # train_unit as a fresh run: it reads the first stage's weights
        run = SE.make_run(["--smoke", "--checkpoint-dir", str(tmp_path / "k_ckpt")])
        solver = SE.solver_from_args(run.args, SE.SETTINGS["smoke"]["tol"])[0]
        return SE.train_unit(run, SE.SETTINGS["smoke"], SD.make_dataset(40), solver, model, 30, 0)

    with pytest.raises(CheckpointError, match=r"of other settings: lr=0.5 \(not 0.01\)"):
        second_stage_alone()
    Checkpoint(str(tmp_path / "k_ckpt" / "final" / f"{first}_n30_seed0.ckpt")).save(
        dict(stage1, step=iters - 1))
    with pytest.raises(CheckpointError, match=rf"settings: {iters - 1} iterations \(not {iters}\)"):
        second_stage_alone()
    Checkpoint(str(tmp_path / "k_ckpt" / "final" / f"{first}_n30_seed0.ckpt")).save(stage1)
    assert second_stage_alone()["step"] == total
    # an extension must replay the old schedule's last steps: at most twice its length
    from reproduce.latent import train
    with pytest.raises(ValueError, match="between 5 and 10"):
        train(None, "u", None, None, 11, 0.1, 1, seed=0, lr_final=0.01, extends=("t", 5))


def test_measure_solvers_keeps_the_fastest_repeat_and_the_solves_nfe():
    """Each setting's seconds are the fastest of SPEED_REPEATS gradients (not the first, the
    last, the median or the mean), its NFE those the solves report; a gradient whose NFE changes
    between repeats (not a deterministic measurement) is recorded and reported so."""
    def make_objective(solver):
        calls = []

        def loss_and_grad(params, rng, stats):
            calls.append(1)
            if len(calls) != 2:  # only the second of three is fast
                time.sleep(0.5)
            f = lambda p: anp.sum(odeint(lambda y, t, a: -a * y, np.ones(2), np.linspace(0, 1, 3),
                                         (p,), rtol=solver["rtol"], atol=solver["atol"],
                                         method=solver["method"], stats=stats,
                                         adjoint_method=solver["adjoint_method"],
                                         adjoint_seminorm=solver["adjoint_seminorm"])[-1])
            value, g = value_and_grad(f)(params)
            assert np.isclose(g, -2 * np.exp(-params), rtol=1e-3)  # d/da of 2 exp(-a)
            return value, g
        return loss_and_grad

    rows = L.measure_solvers(make_objective, 0.7, [1e-6], methods=("adams",))
    assert len(rows) == 8 and {r["repeats"] for r in rows} == {L.SPEED_REPEATS}
    assert L.SPEED_REPEATS == 3 and all(r["seconds"] < 0.25 for r in rows)
    assert not any("nfe_varied" in r for r in rows)
    stats = SolverStats()
    make_objective(dict(method="adams", rtol=1e-6, atol=1e-6, adjoint_method=None,
                        adjoint_seminorm=False))(0.7, None, stats)
    assert stats.forward.nfe > 0 and stats.backward.nfe > 0
    assert (rows[0]["nfe_forward"], rows[0]["nfe_backward"]) == (stats.forward.nfe,
                                                                 stats.backward.nfe)
    assert "the fastest of 3 repeats" in L.solver_speed_block(rows, "m")
    assert "one timing each" in L.solver_speed_block(
        [{k: v for k, v in r.items() if k != "repeats"} for r in rows], "m")

    def nondeterministic(solver):
        count = []

        def loss_and_grad(params, rng, stats):
            count.append(1)
            stats.forward.nfe += len(count)
            return 0.0, 0.0
        return loss_and_grad
    rows = L.measure_solvers(nondeterministic, 0.7, [1e-6], methods=("adams",))
    assert [r["nfe_varied"] for r in rows] == [[[1, 0], [2, 0], [3, 0]]] * 8
    assert rows[0]["nfe_forward"] in (1, 2, 3) and rows[0]["nfe_backward"] == 0
    text = L.solver_speed_block(rows, "m")
    assert "Not deterministic" in text and "adams / adams / 1.0e-06 / full norm: 1 and 0, " \
        "2 and 0, 3 and 0;" in text
