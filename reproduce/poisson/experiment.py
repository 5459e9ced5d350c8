"""Figure 8 of the paper (Section 5): a latent ODE with a Poisson process likelihood.

    python -m reproduce poisson --quick
    python -m reproduce poisson --full --resume

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
import numpy as np

from reproduce.common import Run, partial_note
from reproduce.latent import (PAPER_TOL, SPEED_REPEATS, add_solver_args, measure_solvers,
                              solver_from_args, train, training_summary)

from .data import TRUE, make_dataset
from .figures import figure_8, figure_training
from .models import HIDDEN_MLP, LATENT, evaluate, init_model, objective

# What each mode runs: sequences, fresh sequences per intensity, iterations, tolerance,
# checkpoint interval.
SETTINGS = {
    "smoke": dict(n_sequences=3, n_fresh=2, iters=5, tol=1e-5, ckpt_every=2),
    "quick": dict(n_sequences=8, n_fresh=20, iters=500, tol=1e-5, ckpt_every=25),
    "full": dict(n_sequences=16, n_fresh=50, iters=2000, tol=PAPER_TOL, ckpt_every=25),
}
LR = 0.01
UNIT = "latent_ode"

CHOICES = {
    "true intensity": f"lambda(t) = exp(log {np.exp(TRUE['log_base']):g} + r cos(2 pi t / "
                      f"{TRUE['period']:g} + phi)) on [0, {TRUE['t_end']:g}], r ~ "
                      f"U({TRUE['r_range'][0]:g}, {TRUE['r_range'][1]:g}) and phi ~ U(0, 2 pi) "
                      "per sequence (the paper does not give its toy data); about 25 events per "
                      "sequence",
    "simulation": "thinning (Lewis and Shedler): a homogeneous process at rate max lambda, each "
                  "event kept with probability lambda(t) / max lambda",
    "model": f"latent {LATENT}; dynamics {LATENT}-{HIDDEN_MLP}-{LATENT} ELU; intensity "
             f"lambda(z) = exp(g(z)), g {LATENT}-{HIDDEN_MLP}-1 ELU; prior N(0, I) on z0; "
             "q(z0_k) = N(m_k, diag(s_k^2)) with m_k, log s_k free "
             "parameters per sequence (non-amortised: a recognition RNN reading event times, "
             "tried first, stayed at the constant-rate solution for 600 iterations in a quick "
             "exploration, while this form learned the oscillation); ELBO with one "
             "reparameterised sample per sequence and the KL in closed form",
    "likelihood": "sum_i log lambda(z(t_i)) - Lambda(t_end), with Lambda an extra state of the "
                  "same odeint call (dLambda/dt = lambda(z), Lambda(0) = 0); all sequences are "
                  "solved in one call on the union of their event times",
    "training": f"Adam, learning rate {LR:g}, all sequences every iteration, init "
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


def units(run):
    """One model: the latent ODE fitted to all sequences (checked against --only)."""
    return run.select([UNIT])


def add_args(parser):
    add_solver_args(parser)


def make_run(argv=None):
    return Run("poisson", argv, description=__doc__.split("\n\n")[0], extra_args=add_args)


def main(argv=None):
    run = make_run(argv)
    cfg = SETTINGS[run.mode]
    todo = units(run)
    solver, solver_text = solver_from_args(run.args, cfg["tol"])
    tol = solver["rtol"]
    data = make_dataset(cfg["n_sequences"], cfg["n_fresh"])
    init = lambda rng: init_model(rng, cfg["n_sequences"])  # noqa: E731
    state = train(run, UNIT, init, objective(data, solver), cfg["iters"], LR, cfg["ckpt_every"])
    if run.partial:
        print(f"poisson: trained {', '.join(todo)}; checkpoint in {run.ckpt_dir}")
        return 0
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
    note = partial_note({UNIT: (state["step"], cfg["iters"])})
    if note:
        results["note"] = note
    results["solver"] = solver
    choices = dict(CHOICES)
    choices.update({
        "data size": f"{cfg['n_sequences']} sequences",
        "iterations": cfg["iters"],
        "solver": solver_text,
        "solver measurements": "solver_speed: seconds (the fastest of "
                               f"{SPEED_REPEATS} repeats) and NFE of one training gradient "
                               "of the trained model per method, tolerance and adjoint norm; "
                               "tolerance_effect: the evaluation repeated at each tolerance"})
    run.save_results(results, choices=choices)
    print(f"poisson: wrote {run.out_dir}", flush=True)
    return 0
