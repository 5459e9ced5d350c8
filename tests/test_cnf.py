"""Figures 4 and 6 (reproduce/cnf): the flows' log-densities against autograd Jacobians, the CNF's
reversibility and Hutchinson's estimator, resuming training, and a smoke run of the experiment."""
import json

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad, jacobian, value_and_grad
from scipy.stats import multivariate_normal

from reproduce.cnf import data as targets
from reproduce.cnf import experiment, models
from reproduce.common import Adam, RMSprop, Run, fit

TIGHT = dict(rtol=1e-10, atol=1e-10, method="adams")


def random_cnf(seed=0, n_units=5):
    """A CNF whose dynamics are far from zero (unlike init_cnf's near-identity start)."""
    rng = np.random.RandomState(seed)
    theta = models.init_cnf(rng, n_units, hidden=4)
    theta["V"] = rng.randn(*theta["V"].shape)
    theta["d"] = rng.randn(*theta["d"].shape)
    return theta


def random_planar(seed=0, n_layers=4):
    rng = np.random.RandomState(seed)
    return {"u": 1.5 * rng.randn(n_layers, 2), "w": 1.5 * rng.randn(n_layers, 2),
            "b": rng.randn(n_layers)}


def per_sample_jacobians(fun, z):
    """d fun(z)[i] / d z[i] for every row i: (batch, 2, 2), from autograd's full jacobian."""
    full = jacobian(fun)(z)                       # (batch, 2, batch, 2)
    return np.stack([full[i, :, i, :] for i in range(len(z))])


def test_base_density_is_the_standard_normal():
    z = np.random.RandomState(0).randn(6, 2)
    np.testing.assert_allclose(models.log_normal(z),
                               multivariate_normal(np.zeros(2), np.eye(2)).logpdf(z), rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# CNF


@pytest.mark.parametrize("t", [0.0, 0.37, 1.0])
def test_cnf_exact_trace_equals_trace_of_autograd_jacobian(t):
    theta = random_cnf()
    z = np.random.RandomState(1).randn(5, 2)

    def velocity(z):
        y = anp.concatenate([z, anp.zeros((len(z), 1))], axis=1)
        return models.cnf_dynamics(y, t, theta)[:, :2]

    traces = np.trace(per_sample_jacobians(velocity, z), axis1=1, axis2=2)
    dlogp = models.cnf_dynamics(np.concatenate([z, np.zeros((5, 1))], axis=1), t, theta)[:, 2]
    assert np.max(np.abs(traces)) > 0.1  # a real test: the dynamics are not trivial
    np.testing.assert_allclose(dlogp, -traces, rtol=1e-12, atol=1e-12)


def test_hutchinson_integrand_is_eps_jacobian_eps():
    theta = random_cnf()
    rng = np.random.RandomState(2)
    z, eps = rng.randn(5, 2), rng.randn(5, 2)
    jac = per_sample_jacobians(
        lambda z: models.cnf_dynamics(anp.concatenate([z, anp.zeros((5, 1))], axis=1), 0.5,
                                      theta)[:, :2], z)
    estimate = -models.cnf_dynamics(np.concatenate([z, np.zeros((5, 1))], axis=1), 0.5, theta,
                                    eps)[:, 2]
    np.testing.assert_allclose(estimate, np.einsum("bi,bij,bj->b", eps, jac, eps), rtol=1e-12)


def test_hutchinson_estimator_is_unbiased():
    """N probes of one starting point in one solve: the mean change in log-density must match
    the exact trace's within 4 standard errors (a 6e-5 chance of a false failure under the CLT),
    and the estimates must really vary (else the test would be vacuous)."""
    theta = random_cnf(seed=3)
    n = 4000
    rng = np.random.RandomState(4)
    z = np.tile(np.array([[0.3, -0.5]]), (n, 1))
    eps = rng.choice([-1.0, 1.0], size=(n, 2))
    _, exact = models.cnf_flow(theta, z[:1], np.array([0.0, 1.0]), **TIGHT)
    _, estimates = models.cnf_flow(theta, z, np.array([0.0, 1.0]), eps, **TIGHT)
    estimates = estimates[-1]
    se = np.std(estimates) / np.sqrt(n)
    assert se > 1e-3
    assert abs(np.mean(estimates) - exact[-1, 0]) < 4 * se


@pytest.mark.parametrize("tol", [1e-5, 1e-8])
def test_cnf_forward_then_backward_recovers_the_samples(tol):
    theta = random_cnf(seed=5, n_units=8)
    z0 = np.random.RandomState(6).randn(50, 2)
    opts = dict(rtol=tol, atol=tol, method="adams")
    x, delta = models.cnf_flow(theta, z0, np.array([0.0, 1.0]), **opts)
    back, delta_back = models.cnf_flow(theta, x[-1], np.array([1.0, 0.0]), **opts)
    assert np.max(np.abs(x[-1] - z0)) > 0.5  # the flow moves the points
    # The solver bounds each step's local error by about tol; after ~30 steps each way the
    # global error measured is ~10 tol. A wrong reversal would be off by O(1).
    assert np.max(np.abs(back[-1] - z0)) < 50 * tol
    assert np.max(np.abs(delta[-1] + delta_back[-1])) < 50 * tol


def test_cnf_sample_and_log_density_agree():
    """log q(x) from sampling (forward) equals log q(x) from the normalizing direction."""
    theta = random_cnf(seed=7)
    z0 = np.random.RandomState(8).randn(20, 2)
    x, log_q = models.cnf_sample(theta, z0, **TIGHT)
    np.testing.assert_allclose(models.cnf_log_density(theta, x, **TIGHT), log_q, atol=1e-7)


def test_zero_dynamics_leave_the_base_density():
    theta = random_cnf()
    m = len(theta["d"]) // 6
    theta["V"][:, 2 * m:4 * m] = 0.0  # u_n(t) = 0 for all t: dz/dt = 0
    theta["d"][2 * m:4 * m] = 0.0
    x = np.random.RandomState(9).randn(10, 2)
    np.testing.assert_array_equal(models.cnf_sample(theta, x, rtol=1e-5, atol=1e-5)[0], x)
    np.testing.assert_allclose(models.cnf_log_density(theta, x, rtol=1e-5, atol=1e-5),
                               models.log_normal(x), rtol=0, atol=1e-14)


def test_cnf_adjoint_gradient_matches_direct_backprop():
    theta = random_cnf(seed=10, n_units=3)
    z0 = np.random.RandomState(11).randn(8, 2)

    def loss(theta, method):
        x, log_q = models.cnf_sample(theta, z0, rtol=1e-9, atol=1e-9, method=method)
        return anp.mean(log_q + targets.u1(x))

    adjoint, direct = grad(loss)(theta, "adams"), grad(loss)(theta, "dopri5")
    for name in theta:
        np.testing.assert_allclose(adjoint[name], direct[name], rtol=1e-5, atol=1e-7)


def test_bad_points_are_refused():
    theta = models.init_cnf(np.random.RandomState(0), 2)
    with pytest.raises(ValueError, match="shape"):
        models.cnf_sample(theta, np.zeros((4, 3)))
    with pytest.raises(ValueError, match="non-finite"):
        models.planar_forward(random_planar(), np.array([[0.0, np.nan]]))
    with pytest.raises(ValueError, match="eps"):
        models.cnf_flow(theta, np.zeros((4, 2)), np.array([0.0, 1.0]), eps=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="hidden units"):
        models.init_cnf(np.random.RandomState(0), 0)


# ---------------------------------------------------------------------------------------------
# Planar NF


def reference_planar(params, z):
    """The planar flow written directly in autograd operations (the model uses a primitive with a
    hand-written VJP instead)."""
    u_hat = models.constrained_u(params["u"], params["w"])
    logdet = 0.0
    for k in range(len(params["b"])):
        h = anp.tanh(anp.dot(z, params["w"][k]) + params["b"][k])
        z = z + h[:, None] * u_hat[k]
        logdet = logdet + anp.log(anp.abs(1 + (1 - h ** 2) * anp.dot(params["w"][k], u_hat[k])))
    return z, logdet


def test_planar_logdet_equals_log_abs_det_of_autograd_jacobian():
    params = random_planar()
    z = np.random.RandomState(12).randn(6, 2)
    jac = per_sample_jacobians(lambda z: reference_planar(params, z)[0], z)
    _, logdet = models.planar_forward(params, z)
    np.testing.assert_allclose(logdet, np.log(np.abs(np.linalg.det(jac))), rtol=1e-10)
    assert np.max(np.abs(logdet)) > 0.1


def test_planar_primitive_matches_autograd_reference_values_and_gradients():
    params = random_planar(seed=13)
    z = np.random.RandomState(14).randn(7, 2)

    def loss(fun):
        return lambda p, z: anp.sum(anp.sin(fun(p, z)[0])) + anp.sum(anp.cos(fun(p, z)[1]))

    for a, b in zip(models.planar_forward(params, z), reference_planar(params, z)):
        np.testing.assert_allclose(a, b, rtol=1e-13)
    for argnum in (0, 1):
        fast = grad(loss(models.planar_forward), argnum)(params, z)
        ref = grad(loss(reference_planar), argnum)(params, z)
        for key in (fast if argnum == 0 else [None]):
            a, b = (fast[key], ref[key]) if key else (fast, ref)
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_planar_constraint_keeps_layers_invertible():
    u = np.array([[-5.0, -5.0], [3.0, -1.0]])
    w = np.array([[1.0, 1.0], [2.0, 0.5]])
    assert np.all(np.sum(w * models.constrained_u(u, w), axis=1) > -1)


def test_planar_inverse_inverts_and_gives_the_density():
    params = random_planar(seed=15, n_layers=6)
    z0 = np.random.RandomState(16).randn(30, 2)
    x, log_q = models.planar_sample(params, z0)
    np.testing.assert_allclose(models.planar_inverse(params, x), z0, atol=1e-10)
    np.testing.assert_allclose(models.planar_log_density_generative(params, x), log_q,
                               atol=1e-9)


# ---------------------------------------------------------------------------------------------
# Targets, data, optimiser


def test_log_normaliser_of_a_gaussian_energy():
    energy = lambda z: 0.5 * np.sum((z / np.array([0.7, 1.0])) ** 2, axis=1)  # noqa: E731
    assert targets.log_normaliser(energy) == pytest.approx(np.log(2 * np.pi * 0.7),
                                                           abs=1e-6)


def test_data_generators():
    rng = np.random.RandomState(0)
    circles = targets.two_circles(20000, rng, noise=0.0)
    radii = np.sort(np.unique(np.round(np.linalg.norm(circles, axis=1), 9)))
    np.testing.assert_allclose(radii, [1.0, 2.0])
    moons = targets.two_moons(20000, rng)
    assert moons.shape == (20000, 2)
    np.testing.assert_allclose(moons.mean(axis=0), 0.0, atol=0.05)
    same = targets.two_moons(5, np.random.RandomState(1))
    np.testing.assert_array_equal(same, targets.two_moons(5, np.random.RandomState(1)))


def test_rmsprop_momentum_accumulates_scaled_steps():
    opt = RMSprop(0.1, gamma=0.5, eps=0.0, momentum=0.9)
    x = np.array([1.0])
    x1 = opt.step(x, np.array([2.0]))            # avg = 2, step = 0.1 * 2 / sqrt(2)
    s1 = 0.1 * 2 / np.sqrt(2.0)
    np.testing.assert_allclose(x1, 1.0 - s1)
    x2 = opt.step(x1, np.array([1.0]))           # avg = 1.5, v = 0.9 s1 + 0.1 / sqrt(1.5)
    np.testing.assert_allclose(x2, x1 - (0.9 * s1 + 0.1 / np.sqrt(1.5)))


# ---------------------------------------------------------------------------------------------
# Training and the experiment


class Interrupted(Exception):
    pass


@pytest.mark.parametrize("kind", ["cnf", "nf"])
def test_resume_after_interruption_gives_the_uninterrupted_parameters(tmp_path, kind):
    """Kill training at step 7 (last checkpoint at step 6), resume to step 10: the parameters,
    optimiser state and loss history equal those of an uninterrupted 10-step run exactly."""

    def setup(name, stop_at=None, resume=False):
        argv = ["--smoke", "--out", str(tmp_path / "out"),
                "--checkpoint-dir", str(tmp_path / name)] + (["--resume"] if resume else [])
        run = Run("cnf_test", argv)

        def loss(params, rng, step, stats):
            if step == stop_at:
                raise Interrupted
            z0 = rng.randn(8, 2)
            if kind == "cnf":
                x, log_q = models.cnf_sample(params, z0, rtol=1e-5, atol=1e-5, stats=stats)
            else:
                x, log_q = models.planar_sample(params, z0)
            return anp.mean(log_q + targets.u1(x))

        rng = np.random.RandomState(0)
        if kind == "cnf":
            params, opt = models.init_cnf(rng, 2, hidden=4), Adam(0.05)
        else:
            params, opt = models.init_planar(rng, 3), RMSprop(0.05, momentum=0.9)
        return run, params, loss, opt

    run, params, loss, opt = setup("straight")
    straight = fit(run, "m", params, value_and_grad(loss), opt, 10, every=3)

    run, params, loss, opt = setup("killed", stop_at=7)
    with pytest.raises(Interrupted):
        fit(run, "m", params, value_and_grad(loss), opt, 10, every=3)
    run, params, loss, opt = setup("killed", resume=True)
    resumed = fit(run, "m", params, value_and_grad(loss), opt, 10, every=3)

    assert resumed["step"] == straight["step"] == 10
    assert resumed["history"]["loss"] == straight["history"]["loss"]
    for name in straight["params"]:
        np.testing.assert_array_equal(resumed["params"][name], straight["params"][name])
    for name, value in straight["optimizer"].items():
        np.testing.assert_array_equal(resumed["optimizer"][name], value)
    assert not np.array_equal(straight["params"][list(params)[0]], params[list(params)[0]])


def test_smoke_run_writes_results_and_resume_reproduces_them(tmp_path):
    argv = ["--smoke", "--out", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ck")]
    experiment.main(argv)
    first = json.loads((tmp_path / "out" / "results.json").read_text())
    for name in ("figure4.png", "figure4_samples.png", "figure6.png", "training_curves.png"):
        assert (tmp_path / "out" / name).stat().st_size > 10_000
    res = first["results"]
    assert set(res["figure4"]) == {"U1", "U2", "U3"}
    for row in res["figure4"].values():
        for kind in ("nf", "cnf"):
            assert set(row[kind]) == {"2", "8", "32"}
            assert all(np.isfinite(v["kl"]) for v in row[kind].values())
    for row in res["figure6"].values():
        assert np.isfinite(row["test_log_likelihood"]["cnf"]["mean"])
        assert row["reconstruction"]["training_tolerance"]["max_abs_error"] < 1e-3
    assert "targets" in first["choices"] and first["mode"] == "smoke"

    experiment.main(argv + ["--resume"])  # everything is trained: only evaluates again
    again = json.loads((tmp_path / "out" / "results.json").read_text())
    assert again["results"]["figure4"] == res["figure4"]
    assert again["results"]["seconds_per_iteration"] == res["seconds_per_iteration"]
    from reproduce.common import CheckpointError
    with pytest.raises(CheckpointError, match="method: 'adams' there, 'dopri5' here"):
        experiment.main(argv + ["--resume", "--method", "dopri5"])

    # a run cut short: evaluate-only reports the checkpoints as they stand, and says so
    (tmp_path / "ck" / "fig4_U2_cnf8.ckpt").unlink()
    (tmp_path / "ck" / "final" / "fig4_U2_cnf8.ckpt").unlink()  # nor its final weights
    experiment.main(argv + ["--resume", "--evaluate-only"])
    partial = json.loads((tmp_path / "out" / "results.json").read_text())["results"]
    assert partial["seconds_per_iteration"]["fig4_U2_cnf8"]["iterations"] == 0
    assert "fig4_U2_cnf8 0 of" in partial["note"]
    assert partial["iterations"]["fig4_U2_cnf8"]["run"] == 0
    assert partial["iterations"]["fig4_U1_cnf8"]["run"] == partial["iterations"]["fig4_U1_cnf8"][
        "planned"]
    assert partial["figure4"]["U1"] == res["figure4"]["U1"]  # the trained ones are unchanged
    assert not (tmp_path / "ck" / "fig4_U2_cnf8.ckpt").exists()  # and nothing is written
