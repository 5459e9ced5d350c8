"""Poisson process latent ODE (Figure 8): the thinning simulator, the log-likelihood with its
integral carried as an extra ODE state against closed forms, the dynamics' VJP, and the run."""
import json

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad

from reproduce import poisson as P
from reproduce.poisson import data as PD
from reproduce.poisson import models as PM
from reproduce.latent import init_mlp, mlp

TIGHT = dict(method="adams", rtol=1e-10, atol=1e-10)


def test_thinning_counts_match_the_integrated_intensity():
    rng = np.random.RandomState(0)
    r, phi, t_end = 1.2, 0.7, 10.0
    lam = lambda t: PD.true_intensity(t, r, phi)  # noqa: E731
    rate_max = np.exp(PD.TRUE["log_base"] + r)
    events = [PD.simulate_events(rng, lam, t_end, rate_max) for _ in range(400)]
    for e in events:
        assert np.all(np.diff(e) > 0) and e.min() >= 0 and e.max() <= t_end
    t = np.linspace(0, t_end, 20001)
    expected = np.trapezoid(lam(t), t)
    counts = np.array([len(e) for e in events])
    assert abs(counts.mean() - expected) < 4 * np.sqrt(expected / len(events))
    # events fall where the intensity is high: the first half-period vs the trough
    all_events = np.concatenate(events)
    frac_high = np.mean(np.cos(2 * np.pi * all_events / PD.TRUE["period"] + phi) > 0)
    assert frac_high > 0.7
    with pytest.raises(ValueError, match="exceeds"):
        PD.simulate_events(rng, lam, t_end, 1.0)


def _constant_rate_params(rng, log_rates_by_z=False):
    params = PM.init_model(rng)
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
    times, mask = PD.pad(events, t_end)
    assert times.shape == (3, 12) and mask.sum() == 17
    counts = np.array([5, 0, 12])
    params = _constant_rate_params(rng)
    z0 = rng.randn(3, PM.LATENT)
    ll = PM.log_likelihood(params, z0, times, mask, t_end, TIGHT)
    np.testing.assert_allclose(ll, counts * np.log(3.0) - 3.0 * t_end, rtol=1e-8)
    # its gradient with respect to the log-rate b2 is N - c T (through the adjoint)
    g = grad(lambda b2: anp.sum(PM.log_likelihood(dict(params, inten=dict(params["inten"], b2=b2)),
                                                 z0, times, mask, t_end, TIGHT)))(
        params["inten"]["b2"])
    np.testing.assert_allclose(g, [np.sum(counts - 3.0 * t_end)], rtol=1e-7)

    still = _constant_rate_params(rng, log_rates_by_z=True)
    still["dyn"] = {k: np.zeros_like(v) for k, v in still["dyn"].items()}
    lam = np.exp(mlp(still["inten"], z0)[:, 0])
    assert np.ptp(lam) > 0.1  # really different rates
    ll = PM.log_likelihood(still, z0, times, mask, t_end, TIGHT)
    np.testing.assert_allclose(ll, counts * np.log(lam) - lam * t_end, rtol=1e-8)


def test_held_out_window_log_likelihood_closed_forms():
    """window_log_likelihood (the held-out scoring) for a constant rate c: N log c - c (t1 - t0),
    counting only the events inside [t0, t1]; for lambda = exp(a t) the integral is
    (e^{a t1} - e^{a t0}) / a, matched to the grid's trapezoid accuracy."""
    t_grid = np.linspace(0.0, 12.5, 4001)
    events = np.array([0.5, 3.0, 9.9, 10.2, 11.0, 12.4])
    c = 2.7
    flat = np.full_like(t_grid, c)
    assert PM.window_log_likelihood(events, t_grid, flat, 0.0, 10.0) == pytest.approx(
        3 * np.log(c) - c * 10.0, rel=1e-12)
    assert PM.window_log_likelihood(events, t_grid, flat, 10.0, 12.5) == pytest.approx(
        3 * np.log(c) - c * 2.5, rel=1e-12)
    assert PM.window_log_likelihood([], t_grid, flat, 10.0, 12.5) == pytest.approx(-c * 2.5)
    a = 0.3
    grown = np.exp(a * t_grid)
    expected = a * np.sum(events[events <= 10.0]) - (np.exp(a * 10.0) - 1.0) / a
    assert PM.window_log_likelihood(events, t_grid, grown, 0.0, 10.0) == pytest.approx(
        expected, rel=1e-6)
    with pytest.raises(ValueError, match="grid"):
        PM.window_log_likelihood(events, t_grid, flat, 0.0, 13.0)


def test_evaluate_scores_each_fresh_sequence_under_its_own_intensity(monkeypatch):
    """evaluate's held-out log-likelihoods are, per window, the mean over intensities of the mean
    over that intensity's own fresh sequences (the true intensity's against a hand computation);
    a learned intensity equal to the truth scores as the truth, with no L2 error, and a learned
    intensity that pairs each sequence with another's scores lower."""
    data = PD.make_dataset(3, n_fresh=4)
    assert np.ptp(data["r"]) > 0.2 or np.ptp(data["phi"]) > 0.5  # really different intensities
    params = PM.init_model(np.random.RandomState(0), 3)
    n_grid = 2001
    t_grid = np.linspace(0.0, data["t_extrap"], n_grid)
    truth = np.stack([PD.true_intensity(t_grid, r, phi) for r, phi in zip(data["r"], data["phi"])])

    def by_hand(curves, t0, t1):
        return np.mean([np.mean([PM.window_log_likelihood(e, t_grid, curves[k], t0, t1)
                                 for e in data["fresh"][k]]) for k in range(3)])

    for learned, same in ((truth, True), (truth[[1, 2, 0]], False)):
        monkeypatch.setattr(PM, "learned_intensity", lambda *a, curves=learned: curves)
        res, (grid, got, true) = PM.evaluate(params, data, TIGHT, seed=0, n_grid=n_grid)
        np.testing.assert_array_equal(grid, t_grid)
        assert res["fresh_sequences_per_intensity"] == 4
        for window, (t0, t1) in (("held_out", (0.0, data["t_end"])),
                                 ("held_out_extrapolated", (data["t_end"], data["t_extrap"]))):
            assert res[f"log_likelihood_{window}_true"] == pytest.approx(
                by_hand(truth, t0, t1), rel=1e-12)
            if same:
                assert (res[f"log_likelihood_{window}_learned"]
                        == res[f"log_likelihood_{window}_true"])
        if same:
            assert res["intensity_relative_l2_error"] == 0.0
            assert res["extrapolated_intensity_relative_l2_error"] == 0.0
            assert res["log_likelihood_in_sample_learned"] == res["log_likelihood_in_sample_true"]
        else:
            assert res["log_likelihood_held_out_learned"] < res["log_likelihood_held_out_true"]
            assert res["intensity_relative_l2_error"] > 0.1


def test_fresh_sequences_follow_the_same_intensities_and_leave_training_data_alone():
    small, big = PD.make_dataset(4, n_fresh=0), PD.make_dataset(4, n_fresh=300)
    for a, b in zip(small["events"], big["events"]):
        np.testing.assert_array_equal(a, b)
    t_end, t_extrap = big["t_end"], big["t_extrap"]
    for k in range(4):
        counts = [len(e) for e in big["fresh"][k]]
        t = np.linspace(0, t_extrap, 20001)
        expected = np.trapezoid(PD.true_intensity(t, big["r"][k], big["phi"][k]), t)
        assert abs(np.mean(counts) - expected) < 4 * np.sqrt(expected / 300)
        assert max(e.max() for e in big["fresh"][k] if len(e)) > t_end  # the extrapolated part


def test_log_likelihood_integral_against_quadrature():
    """A moving latent state: the integral state equals the quadrature of lambda(z(t))."""
    rng = np.random.RandomState(2)
    params = PM.init_model(rng)
    z0 = rng.randn(2, PM.LATENT)
    t_end = 3.0
    events = [np.array([0.5, 1.7]), np.array([2.9])]
    times, mask = PD.pad(events, t_end)
    ll = PM.log_likelihood(params, z0, times, mask, t_end, TIGHT)
    t = np.linspace(0, t_end, 3001)
    lam = PM.learned_intensity(params, z0, t, TIGHT)  # (2, 3001)
    for b, e in enumerate(events):
        expected = np.sum(np.log(np.interp(e, t, lam[b]))) - np.trapezoid(lam[b], t)
        np.testing.assert_allclose(ll[b], expected, rtol=1e-5)


def test_poisson_dynamics_vjp_matches_autograd():
    rng = np.random.RandomState(3)
    dyn, inten = init_mlp(rng, 4, 20, 4), init_mlp(rng, 4, 20, 1)
    y, g = rng.randn(5, 5), rng.randn(5, 5)
    f = PM.PoissonDynamics()
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
    for key in ("intensity_relative_l2_error", "elbo_per_sequence",
                "extrapolated_intensity_relative_l2_error"):
        assert np.isfinite(res[key])
    for window in ("in_sample", "held_out", "held_out_extrapolated"):
        for name in ("learned", "true", "constant"):
            assert np.isfinite(res[f"log_likelihood_{window}_{name}"])
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


@pytest.mark.slow
def test_resume_refuses_a_checkpoint_made_with_other_settings(tmp_path, capsys):
    """The run's configuration (mode, seed, solver flags) is checked on resume: a checkpoint of
    a run with other solver settings is refused with one line naming the file and the settings."""
    from reproduce.__main__ import main
    argv = ["poisson", "--smoke", "--seed", "3", "--out", str(tmp_path / "o"),
            "--checkpoint-dir", str(tmp_path / "c")]
    with pytest.raises(KeyboardInterrupt):
        main(argv + ["--stop-after", "3", "--tol", "1e-2", "--method", "lsoda", "--no-seminorm"])
    capsys.readouterr()
    assert main(argv + ["--resume"]) == 2  # refused: the runner does not retry it
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "latent_ode.ckpt" in err
    for setting in ("method: 'lsoda' there, 'adams' here", "no_seminorm: True there",
                    "tol: 0.01 there, None here"):
        assert setting in err
    assert not (tmp_path / "o" / "results.json").exists()


def test_the_report_words_the_log_likelihoods_from_their_numbers():
    from reproduce.poisson.report import reading
    res = {f"log_likelihood_{w}_{k}": v for w, vals in (
        ("in_sample", (8.5, 5.8, -0.6)), ("held_out", (4.25, 6.8, -0.6)),
        ("held_out_extrapolated", (0.2, 2.25, 0.5))) for k, v in zip(
        ("learned", "true", "constant"), vals)}
    res["intensity_relative_l2_error_per_sequence"] = [0.1] * 16
    text = reading(res)
    assert "scores 2.700 above the true one" in text and "2.550 below the true one" in text
    assert "2.050 below it in the extrapolated one" in text and "0.300 below a constant" in text
    assert "over-fitting: each of the 16 sequences' z0" in text
    del res["intensity_relative_l2_error_per_sequence"]
    assert "each of the sequences' z0" in reading(res)
    res.update(log_likelihood_held_out_learned=7.0,
               log_likelihood_held_out_extrapolated_learned=0.5 + 1e-4)
    text = reading(res)
    assert "0.200 above the true one in the observed" in text and "level with a constant" in text
    assert "over-fitting" not in text
    assert "in sample only" in reading({"log_likelihood_in_sample_learned": 1.0})
