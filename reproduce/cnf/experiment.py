"""The protocol of Figures 4 and 6, the measured numbers, and the reproduction choices.

Figure 4 (density matching): for each target p ~ exp(-U), planar NFs with K = 2, 8, 32 layers and
planar CNFs with M = 2, 8, 32 hidden units minimise KL(q || p) - log Z = E_q[log q + U], estimated
on a fresh batch of base samples each step. Figure 6 (maximum likelihood): a CNF with 64 hidden
units and an NF with 64 layers maximise E_data[log q(x)] on Two Circles and Two Moons, the CNF is
then run from noise to data to sample, and forward then backward to measure how well the solver
recovers its initial states (the paper's Section 6).
"""
import time

import autograd.numpy as anp
import numpy as np

from autograd import value_and_grad

from odeint_autograd import DEFAULT_TOL, SolverStats
from reproduce.common import Adam, RMSprop, Run, fit, model_rng, partial_note, progress_label

from . import figures, models
from .data import DATASETS, PLOT_LIMIT, TARGETS, log_normaliser

SIZES = (2, 8, 32)                   # Figure 4: K layers (NF) and M hidden units (CNF)
WIDTH = 64                           # Figure 6: K = M = 64
FRACTIONS = (0.05, 0.2, 0.4, 0.6, 0.8, 1.0)  # Figure 6: fractions of the CNF's time
TOL = 1e-5                           # the paper's tolerance for density estimation (Section 6)


# What each mode runs. NF: RMSprop for 500,000 steps as Rezende and Mohamed; lr 1e-5 and
# momentum 0.9 as public reproductions of their experiment (their paper names neither); the
# shorter runs take larger steps so that the parameters can travel a comparable distance.
SETTINGS = {
    "smoke": dict(nf_iters=20, cnf_iters=3, nf_lr=1e-3, cnf_lr=1e-3, batch=32, ml_batch=32,
                  eval_samples=200, test_points=500, grid=24, plot_samples=200,
                  reconstruction_points=100),
    "quick": dict(nf_iters=5_000, cnf_iters=200, nf_lr=1e-3, cnf_lr=1e-3, batch=100,
                  ml_batch=256, eval_samples=5_000, test_points=5_000, grid=60,
                  plot_samples=1_000, reconstruction_points=1_000),
    "full": dict(nf_iters=500_000, cnf_iters=10_000, nf_lr=1e-5, cnf_lr=1e-3, batch=100,
                 ml_batch=256, eval_samples=20_000, test_points=20_000, grid=120,
                 plot_samples=2_000, reconstruction_points=1_000),
}


CHOICES = {
    "targets": "Figure 4 rows are Rezende and Mohamed's (2015) U1 (ring with two modes), U2 "
               "(sine wave), U3 (split sine waves); U2 and U3 get a Gaussian fall-off of "
               "width 0.2 outside |z1| <= 4 (they are not integrable otherwise); log Z by "
               "quadrature on a 1201^2 grid over [-6, 6]^2",
    "base_density": "standard normal N(0, I) in 2-D for both flows",
    "nf": "planar layers z + u_hat tanh(w^T z + b) with Rezende and Mohamed's u_hat "
          "(w^T u_hat = -1 + softplus(w^T u) > -1); log-det by eq. 7; init u, w ~ N(0, "
          "0.1^2), b = 0",
    "cnf": "dz/dt = sum_n sigma_n(t) u_n(t) tanh(w_n(t)^T z + b_n(t)) on t in [0, 1]; "
           "hypernetwork t -> tanh(a t + c) (32 units) -> linear -> (w, u, b, gate logit) "
           "per unit, sigma = logistic; exact trace (eq. 28) in the same solve as z, one "
           "(batch, 3) state; init: w, b of order 1, u of order 0.1/sqrt(M), gates 1/2",
    "figure6_models": f"CNF with M = {WIDTH} units and NF with K = {WIDTH} layers, maximum "
                      "likelihood; the NF maps data to noise (explicit density) and is "
                      "inverted numerically (bisection per layer) to sample; iteration "
                      "counts and optimisers as in Figure 4 (the paper gives none for "
                      "Figure 6)",
}


def units(run):
    """The units this run trains: one per model (fig4_<target>_<nf|cnf><K|M> and
    fig6_<dataset>_<nf|cnf>64), narrowed by --only and --train-only."""
    chosen = None if run.args.train_only is None else [
        key for key in MODELS if _kind(key) == run.args.train_only]
    return run.select(list(MODELS), chosen)


def make_run(argv=None):
    return Run("cnf", argv, extra_args=add_args, selecting=lambda args: ("train_only",),
               description="Figures 4 and 6 (Section 4.1): continuous normalizing flows "
                           "against planar normalizing flows")


def main(argv=None):
    run = make_run(argv)
    cfg = SETTINGS[run.mode]
    solver = {"method": run.args.method, "rtol": TOL, "atol": TOL}
    todo = units(run)
    states = {key: train(run, cfg, solver, key) for key in todo}
    if run.partial:
        print(f"trained {', '.join(todo)}; checkpoints in {run.ckpt_dir}")
        return 0
    fig4 = density_matching(run, cfg, solver, states)
    fig6 = maximum_likelihood(run, cfg, solver, states)
    figures.figure4(run.path("figure4.png"), fig4["panels"], fig4["results"])
    figures.figure4_samples(run.path("figure4_samples.png"), fig4["panels"])
    figures.training_curves(run.path("training_curves.png"),
                          {key: state["history"] for key, state in states.items()})
    figures.figure6(run.path("figure6.png"), fig6["panels"], fig6["results"])
    timing = _per_iteration(states)
    results = {"figure4": fig4["results"], "figure6": fig6["results"],
               "seconds_per_iteration": timing,
               "projected_full_training_s": _projection(timing)}
    results["iterations"] = {key: {"run": state["step"], "planned": _planned(cfg, key)}
                             for key, state in states.items()}
    note = partial_note({key: (it["run"], it["planned"])
                         for key, it in results["iterations"].items()})
    if note:
        results["note"] = note
    run.save_results(results, choices=dict(CHOICES, **_run_choices(run, cfg)))
    print(f"wrote {run.path('results.json')} and the figures in {run.out_dir}")
    return 0


def add_args(parser):
    parser.add_argument("--method", default="adams", choices=("adams", "lsoda", "dopri5"),
                        help="ODE solver of the CNFs: adams/lsoda (scipy, adjoint gradients) or "
                             "dopri5 (direct backprop); default adams")
    parser.add_argument("--trace", default="exact", choices=("exact", "hutchinson"),
                        help="the CNF's d log p/dt in training: exact (eq. 28) or Hutchinson's "
                             "estimator with one Rademacher vector per sample and solve")
    parser.add_argument("--train-only", choices=("nf", "cnf"), default=None,
                        help="train (or, with --resume, continue) only the units of this kind "
                             "and stop (as --only)")


# ---------------------------------------------------------------------------------------------
# The models: fig4_<target>_<nf|cnf><K|M> and fig6_<dataset>_<nf|cnf>64


def model_specs():
    """Every model trained: key -> (figure, target or data set, 'nf' or 'cnf', K or M)."""
    specs = {}
    for name in TARGETS:
        for size in SIZES:
            for kind in ("nf", "cnf"):
                specs[f"fig4_{name}_{kind}{size}"] = ("fig4", name, kind, size)
    for name in DATASETS:
        for kind in ("cnf", "nf"):
            specs[f"fig6_{name}_{kind}{WIDTH}"] = ("fig6", name, kind, WIDTH)
    return specs


MODELS = model_specs()


def _kind(key):
    return MODELS[key][2]


def train(run, cfg, solver, key):
    """Train (or resume, or just load when finished) one model; its training state."""
    figure, name, kind, size = MODELS[key]
    if figure == "fig4":
        fun = _train_nf_kl if kind == "nf" else _train_cnf_kl
        return fun(run, cfg, solver, key, TARGETS[name], size)
    if kind == "nf":
        return _train_nf_ml(run, cfg, key, DATASETS[name], size)
    return _train_cnf_ml(run, cfg, solver, key, DATASETS[name], size)


# ---------------------------------------------------------------------------------------------
# Figure 4


def density_matching(run, cfg, solver, states):
    grid, xy = _grid(PLOT_LIMIT, cfg["grid"])
    results, panels = {}, {}
    for name, energy in TARGETS.items():
        log_z = log_normaliser(energy)
        row = {"log_Z": log_z, "nf": {}, "cnf": {}}
        panel = {"grid": grid, "target": -energy(xy) - log_z, "nf": {}, "cnf": {}}
        for size in SIZES:
            for kind in ("nf", "cnf"):
                key = f"fig4_{name}_{kind}{size}"
                row[kind][size], panel[kind][size] = _evaluate_kl(
                    run, cfg, solver, key, kind, states[key]["params"], energy, log_z, xy)
                panel[kind][size]["progress"] = _progress(cfg, key, states[key])
        results[name], panels[name] = row, panel
    return {"results": results, "panels": panels}


def _train_nf_kl(run, cfg, solver, key, energy, n_layers):
    """Rezende and Mohamed's protocol: RMSprop (with momentum, as reproductions of it use), a
    batch of 100 base samples each step, and their annealed loss E_q[log q + beta_t U] with
    beta_t = min(1, 0.01 + t / T_anneal), T_anneal = 10,000 of 500,000 steps (2% of the run, in
    every mode)."""
    anneal = max(1, int(0.02 * cfg["nf_iters"]))

    def loss(params, rng, step, stats):
        x, log_q = models.planar_sample(params, rng.randn(cfg["batch"], 2))
        beta = min(1.0, 0.01 + step / anneal)
        return anp.mean(log_q + beta * energy(x))

    params = models.init_planar(model_rng(run.seed, key + "/init"), n_layers)
    optimizer = RMSprop(cfg["nf_lr"], momentum=0.9)
    return fit(run, key, params, value_and_grad(loss), optimizer, cfg["nf_iters"], every=5_000,
               config={"lr": cfg["nf_lr"], "batch": cfg["batch"], "anneal": anneal})


def _train_cnf_kl(run, cfg, solver, key, energy, n_units):
    """The paper's protocol: Adam, KL(q || p) (no annealing), exact trace unless --trace."""

    def loss(theta, rng, step, stats):
        z0 = rng.randn(cfg["batch"], 2)
        x, log_q = models.cnf_sample(theta, z0, _noise(run, rng, z0), stats=stats, **solver)
        return anp.mean(log_q + energy(x))

    theta = models.init_cnf(model_rng(run.seed, key + "/init"), n_units)
    return fit(run, key, theta, value_and_grad(loss), Adam(cfg["cnf_lr"]), cfg["cnf_iters"],
               every=100,
               config=_cnf_config(run, cfg, cfg["batch"]))


def _cnf_config(run, cfg, batch):
    return {"lr": cfg["cnf_lr"], "batch": batch, "method": run.args.method,
            "trace": run.args.trace, "tol": TOL}


def _noise(run, rng, z):
    """Hutchinson's probe vectors (Rademacher, one per sample) or None for the exact trace."""
    if run.args.trace == "exact":
        return None
    return rng.choice([-1.0, 1.0], size=np.shape(z))


def _evaluate_kl(run, cfg, solver, key, kind, params, energy, log_z, xy):
    """The training loss E_q[log q + U] on many fresh samples (the same estimator for every
    model), its standard error, KL = loss + log Z, and the density on the plotting grid."""
    rng = model_rng(run.seed, key + "/eval")
    z0 = rng.randn(cfg["eval_samples"], 2)
    if kind == "nf":
        x, log_q = models.planar_sample(params, z0)
        log_q_grid = models.planar_log_density_generative(params, xy)
    else:
        x, log_q = models.cnf_sample(params, z0, **solver)
        log_q_grid = models.cnf_log_density(params, xy, **solver)
    terms = log_q + energy(x)
    loss = float(np.mean(terms))
    result = {"loss": loss, "loss_se": float(np.std(terms) / np.sqrt(len(terms))),
              "kl": loss + log_z, "eval_samples": len(terms)}
    panel = {"log_q": np.asarray(log_q_grid), "samples": np.asarray(x[:cfg["plot_samples"]])}
    return result, panel


# ---------------------------------------------------------------------------------------------
# Figure 6


def _planned(cfg, key):
    return cfg["cnf_iters"] if _kind(key) == "cnf" else cfg["nf_iters"]


def _progress(cfg, key, state):
    return progress_label(state["step"], _planned(cfg, key))


def maximum_likelihood(run, cfg, solver, states):
    grid, xy = _grid(PLOT_LIMIT, cfg["grid"])
    results, panels = {}, {}
    for name, sample in DATASETS.items():
        test = sample(cfg["test_points"], model_rng(run.seed, f"fig6_{name}/test"))
        cnf_key, nf_key = f"fig6_{name}_cnf{WIDTH}", f"fig6_{name}_nf{WIDTH}"
        theta, params = states[cnf_key]["params"], states[nf_key]["params"]
        results[name] = {
            "models": {"cnf": cnf_key, "nf": nf_key},  # their keys in results["iterations"]
            "test_log_likelihood": {
                "cnf": _mean_se(models.cnf_log_density(theta, test, **solver)),
                "nf": _mean_se(models.planar_log_density_normalizing(params, test))},
            "test_points": len(test),
            "reconstruction": _reconstruction(run, cfg, solver, cnf_key, theta)}
        panels[name] = _figure6_panels(run, cfg, solver, cnf_key, theta, params, sample, grid,
                                       xy)
        panels[name]["progress"] = {kind: _progress(cfg, key, states[key])
                                    for kind, key in results[name]["models"].items()}
    return {"results": results, "panels": panels}


def _train_cnf_ml(run, cfg, solver, key, sample, n_units):
    """Maximum likelihood with a fresh batch from the data generator each step; log q(x) by
    solving the data back to t = 0 (normalizing direction)."""

    def loss(theta, rng, step, stats):
        x = sample(cfg["ml_batch"], rng)
        return -anp.mean(models.cnf_log_density(theta, x, _noise(run, rng, x), stats=stats,
                                                **solver))

    theta = models.init_cnf(model_rng(run.seed, key + "/init"), n_units)
    return fit(run, key, theta, value_and_grad(loss), Adam(cfg["cnf_lr"]), cfg["cnf_iters"],
               every=100,
               config=_cnf_config(run, cfg, cfg["ml_batch"]))


def _train_nf_ml(run, cfg, key, sample, n_layers):
    """The NF in the normalizing direction (data -> noise), where its density is explicit;
    sampling then needs its numerical inverse. Same optimiser as in Figure 4, no annealing."""

    def loss(params, rng, step, stats):
        return -anp.mean(models.planar_log_density_normalizing(params, sample(cfg["ml_batch"],
                                                                              rng)))

    params = models.init_planar(model_rng(run.seed, key + "/init"), n_layers)
    optimizer = RMSprop(cfg["nf_lr"], momentum=0.9)
    return fit(run, key, params, value_and_grad(loss), optimizer, cfg["nf_iters"], every=5_000,
               config={"lr": cfg["nf_lr"], "batch": cfg["ml_batch"]})


def _reconstruction(run, cfg, solver, key, theta):
    """Section 6: base samples solved 0 -> T then T -> 0; how far the result is from the start,
    at the training tolerance and at scipy's default, with the NFE of each solve."""
    z0 = model_rng(run.seed, key + "/reconstruction").randn(cfg["reconstruction_points"], 2)
    out = {}
    for label, tol in (("training_tolerance", TOL), ("scipy_default_tolerance", DEFAULT_TOL)):
        opts = dict(solver, rtol=tol, atol=tol)
        fwd, bwd = SolverStats(), SolverStats()
        start = time.time()
        points, delta = models.cnf_flow(theta, z0, np.array([0.0, models.T_END]), stats=fwd,
                                        **opts)
        back, delta_back = models.cnf_flow(theta, points[-1], np.array([models.T_END, 0.0]),
                                           stats=bwd, **opts)
        error = np.linalg.norm(back[-1] - z0, axis=1)
        out[label] = {"tolerance": tol, "max_abs_error": float(np.max(np.abs(back[-1] - z0))),
                      "rms_error": float(np.sqrt(np.mean(error ** 2))),
                      "max_error_norm": float(np.max(error)),
                      "max_log_density_mismatch": float(np.max(np.abs(delta[-1]
                                                                      + delta_back[-1]))),
                      "nfe_forward": fwd.forward.nfe, "nfe_backward": bwd.forward.nfe,
                      "seconds": time.time() - start, "points": len(z0)}
    return out


def _figure6_panels(run, cfg, solver, key, theta, params, sample, grid, xy):
    """Densities and samples of the CNF at each fraction of its time, the NF and the data."""
    times = np.array((0.0,) + FRACTIONS) * models.T_END
    z0 = model_rng(run.seed, key + "/samples").randn(cfg["plot_samples"], 2)
    points, _ = models.cnf_flow(theta, z0, times, **solver)
    densities = [np.asarray(models.cnf_log_density(theta, xy, t_end=t, **solver))
                 for t in times[1:]]
    nf_samples = models.planar_inverse(params, z0)
    data = sample(50 * cfg["plot_samples"], model_rng(run.seed, key + "/data"))
    return {"grid": grid, "fractions": FRACTIONS, "cnf_log_q": densities,
            "cnf_samples": list(points[1:]),
            "nf_log_q": np.asarray(models.planar_log_density_normalizing(params, xy)),
            "nf_samples": nf_samples, "data": data}


# ---------------------------------------------------------------------------------------------
# Shared bits


def _grid(limit, n):
    g = np.linspace(-limit, limit, n)
    xx, yy = np.meshgrid(g, g)
    return g, np.stack([xx.ravel(), yy.ravel()], axis=1)


def _mean_se(values):
    values = np.asarray(values)
    return {"mean": float(np.mean(values)), "se": float(np.std(values) / np.sqrt(len(values)))}


def _per_iteration(states):
    """Training seconds per iteration of every model, and the CNFs' mean NFE per iteration."""
    out = {}
    for key, state in states.items():
        h = state["history"]
        out[key] = {"iterations": state["step"], "seconds": state["seconds"],
                    "seconds_per_iteration": state["seconds"] / max(state["step"], 1)}
        if _kind(key) == "cnf" and h["nfe_f"]:
            last = slice(-max(1, len(h["nfe_f"]) // 10), None)
            out[key].update(mean_nfe_forward=float(np.mean(h["nfe_f"])),
                            mean_nfe_backward=float(np.mean(h["nfe_b"])),
                            mean_nfe_forward_last_10pc=float(np.mean(h["nfe_f"][last])),
                            mean_nfe_backward_last_10pc=float(np.mean(h["nfe_b"][last])))
    return out


def _projection(per_iteration):
    """Seconds the --full training would take at this run's measured cost per iteration (the
    CNFs' cost grows with their NFE during training, so this is a lower estimate for them)."""
    total = 0.0
    for key, timing in per_iteration.items():
        total += timing["seconds_per_iteration"] * _planned(SETTINGS["full"], key)
    return total


def _run_choices(run, cfg):
    """The choices that depend on the mode and the flags."""
    return {
        "loss": "KL(q || p) minimised as E_q[log q(x) + U(x)] = KL - log Z, a fresh batch of base "
                "samples each step; reported for every model with the same estimator on "
                f"{cfg['eval_samples']} fresh samples (mean and standard error), and as KL = "
                "loss + log Z",
        "nf_training": f"RMSprop (decay 0.9, momentum 0.9, lr {cfg['nf_lr']}), "
                       f"{cfg['nf_iters']} steps, batch {cfg['batch']}; Figure 4 with Rezende "
                       "and Mohamed's annealed loss (beta from 0.01 to 1 over the first 2% of "
                       "steps). lr 1e-5 / momentum 0.9 / batch 100 follow public reproductions "
                       "of Rezende and Mohamed (e.g. Parmesan's planar-flow example); --quick "
                       f"and --smoke use lr {SETTINGS['quick']['nf_lr']:g} for their "
                       f"{SETTINGS['full']['nf_iters'] // SETTINGS['quick']['nf_iters']}x fewer "
                       "steps",
        "cnf_training": f"Adam (lr {cfg['cnf_lr']}), {cfg['cnf_iters']} steps, batch "
                        f"{cfg['batch']} (Figure 4) / {cfg['ml_batch']} (Figure 6); trace "
                        f"{run.args.trace}; no annealing (the paper names only Adam and the "
                        "10,000 steps; learning rate and batch are our choices)",
        "solver": f"odeint method={run.args.method}, rtol = atol = {TOL} forward and backward "
                  "(adjoint gradients for adams/lsoda, direct backprop for dopri5); adams "
                  "is the default: the fastest of the three measured on trained CNFs",
        "figure6_data": "Two Circles: radii 2 and 1, noise sd 0.1; Two Moons: scikit-learn's "
                        "make_moons shape, noise sd 0.1, centred and scaled by 2 (numpy "
                        "generators in data.py); a fresh batch from the generator each step; "
                        f"test set of {cfg['test_points']} independent points",
        "reconstruction": f"{cfg['reconstruction_points']} base samples solved 0 -> 1 -> 0 at "
                          f"rtol = atol = {TOL} and at scipy's default {DEFAULT_TOL}",
    }
