"""Poisson process latent ODE (Figure 8): the thinning simulator, the log-likelihood with its
integral carried as an extra ODE state against closed forms, the dynamics' VJP, and the run."""
import json

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad

from reproduce import poisson as P
from reproduce.latent import init_mlp

TIGHT = dict(method="adams", rtol=1e-10, atol=1e-10)


def test_thinning_counts_match_the_integrated_intensity():
    rng = np.random.RandomState(0)
    r, phi, t_end = 1.2, 0.7, 10.0
    lam = lambda t: P.true_intensity(t, r, phi)  # noqa: E731
    rate_max = np.exp(P.TRUE["log_base"] + r)
    events = [P.simulate_events(rng, lam, t_end, rate_max) for _ in range(400)]
    for e in events:
        assert np.all(np.diff(e) > 0) and e.min() >= 0 and e.max() <= t_end
    t = np.linspace(0, t_end, 20001)
    expected = np.trapezoid(lam(t), t)
    counts = np.array([len(e) for e in events])
    assert abs(counts.mean() - expected) < 4 * np.sqrt(expected / len(events))
    # events fall where the intensity is high: the first half-period vs the trough
    all_events = np.concatenate(events)
    frac_high = np.mean(np.cos(2 * np.pi * all_events / P.TRUE["period"] + phi) > 0)
    assert frac_high > 0.7
    with pytest.raises(ValueError, match="exceeds"):
        P.simulate_events(rng, lam, t_end, 1.0)


def _constant_rate_params(rng, log_rates_by_z=False):
    params = P.init_model(rng)
    params["inten"]["W2"] = params["inten"]["W2"] * (1.0 if log_rates_by_z else 0.0)
    params["inten"]["b2"] = np.array([np.log(3.0)])
    return params


def test_log_likelihood_constant_intensity_closed_form():
    """lambda = c: log p = N log c - c T for each sequence of a padded batch; and when the
    latent state does not move (f = 0), lambda_b = exp(g(z0_b)) is a different constant per
    sequence with the same closed form."""
    rng = np.random.RandomState(1)
    t_end = 10.0
    events = [np.sort(rng.uniform(0, t_end, k)) for k in (5, 0, 12)]
    times, mask = P.pad(events, t_end)
    assert times.shape == (3, 12) and mask.sum() == 17
    counts = np.array([5, 0, 12])
    params = _constant_rate_params(rng)
    z0 = rng.randn(3, P.LATENT)
    ll = P.log_likelihood(params, z0, times, mask, t_end, TIGHT)
    np.testing.assert_allclose(ll, counts * np.log(3.0) - 3.0 * t_end, rtol=1e-8)
    # its gradient with respect to the log-rate b2 is N - c T (through the adjoint)
    g = grad(lambda b2: anp.sum(P.log_likelihood(dict(params, inten=dict(params["inten"], b2=b2)),
                                                 z0, times, mask, t_end, TIGHT)))(
        params["inten"]["b2"])
    np.testing.assert_allclose(g, [np.sum(counts - 3.0 * t_end)], rtol=1e-7)

    still = _constant_rate_params(rng, log_rates_by_z=True)
    still["dyn"] = {k: np.zeros_like(v) for k, v in still["dyn"].items()}
    lam = np.exp(P.mlp(still["inten"], z0)[:, 0])
    assert np.ptp(lam) > 0.1  # really different rates
    ll = P.log_likelihood(still, z0, times, mask, t_end, TIGHT)
    np.testing.assert_allclose(ll, counts * np.log(lam) - lam * t_end, rtol=1e-8)


def test_log_likelihood_integral_against_quadrature():
    """A moving latent state: the integral state equals the quadrature of lambda(z(t))."""
    rng = np.random.RandomState(2)
    params = P.init_model(rng)
    z0 = rng.randn(2, P.LATENT)
    t_end = 3.0
    events = [np.array([0.5, 1.7]), np.array([2.9])]
    times, mask = P.pad(events, t_end)
    ll = P.log_likelihood(params, z0, times, mask, t_end, TIGHT)
    t = np.linspace(0, t_end, 3001)
    lam = P.learned_intensity(params, z0, t, TIGHT)  # (2, 3001)
    for b, e in enumerate(events):
        expected = np.sum(np.log(np.interp(e, t, lam[b]))) - np.trapezoid(lam[b], t)
        np.testing.assert_allclose(ll[b], expected, rtol=1e-5)


def test_poisson_dynamics_vjp_matches_autograd():
    rng = np.random.RandomState(3)
    dyn, inten = init_mlp(rng, 4, 20, 4), init_mlp(rng, 4, 20, 1)
    y, g = rng.randn(5, 5), rng.randn(5, 5)
    f = P.PoissonDynamics()
    value, g_y, _, (g_dyn, g_inten) = f.value_and_vjp(g, y, 0.0, dyn, inten)
    np.testing.assert_allclose(value, f(y, 0.0, dyn, inten))
    np.testing.assert_allclose(g_y, grad(lambda yy: anp.sum(f(yy, 0.0, dyn, inten) * g))(y))
    ref = grad(lambda th: anp.sum(f(y, 0.0, *th) * g))((dyn, inten))
    for ours, theirs in ((g_dyn, ref[0]), (g_inten, ref[1])):
        for k in theirs:
            np.testing.assert_allclose(ours[k], theirs[k], atol=1e-12)


def _run(tmp_path, name, *extra):
    return P.main(["--smoke", "--out", str(tmp_path / name), "--checkpoint-dir",
                   str(tmp_path / (name + "_ckpt"))] + list(extra))


@pytest.mark.slow
def test_smoke_run_writes_results_and_resumes(tmp_path):
    assert _run(tmp_path, "whole") == 0
    record = json.loads((tmp_path / "whole" / "results.json").read_text())
    res = record["results"]
    for key in ("intensity_relative_l2_error", "log_likelihood_true_intensity",
                "elbo_per_sequence", "extrapolated_intensity_relative_l2_error"):
        assert np.isfinite(res[key])
    assert "true intensity" in record["choices"]
    assert (tmp_path / "whole" / "fig8.png").stat().st_size > 10_000
    assert "note" not in res
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "split", "--stop-after", "3")  # last checkpoint at 2
    # a run cut short, reported as it stands: the note says how far it got
    assert _run(tmp_path, "split", "--resume", "--evaluate-only") == 0
    cut = json.loads((tmp_path / "split" / "results.json").read_text())["results"]
    assert cut["training"]["iterations"] == 2
    assert "latent_ode 2 of 5" in cut["note"]
    assert _run(tmp_path, "split", "--resume") == 0
    resumed = json.loads((tmp_path / "split" / "results.json").read_text())["results"]
    for key in ("intensity_relative_l2_error", "elbo_per_sequence"):
        assert resumed[key] == res[key]
    assert resumed["training"]["final_loss"] == res["training"]["final_loss"]
