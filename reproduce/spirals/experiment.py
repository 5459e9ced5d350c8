"""Table 2, Figures 9 and 10 of the paper (Section 5.1): a latent ODE against two RNNs on
irregularly sampled bi-directional spirals.

    python -m reproduce spirals --quick     # all of Table 2 at reduced data and iterations
    python -m reproduce spirals --full      # 1000 spirals, the full number of iterations
    python -m reproduce spirals --full --only latent_ode_n30_seed0 --resume   # one unit
    python -m reproduce spirals --full --resume --pilot two_layer_dynamics   # a candidate change
    python -m reproduce spirals --full --resume --evaluate-only   # Table 2 from the weights,
                                                  # scored in --eval-workers processes (the CPUs)

Data (the paper gives only "1000 2-D spirals, each starting at a different point, 100 equally
spaced steps, half clockwise and half counter-clockwise, Gaussian noise"; the rest follows the
authors' later public example, see CHOICES): each spiral is a window of 200 consecutive points of
a dense Archimedean arm; its first 100 points are the observation window, from which n = 30, 50
or 100 are sampled without replacement, and the 100 following are the extrapolation targets.

Models (paper): a latent ODE trained as a VAE (recognition RNN with 25 hidden units reading the
observations backwards with their time gaps, 4-d latent, dynamics and decoder with one hidden
layer of 20 units); an RNN with 25 hidden units trained by Gaussian negative log-likelihood to
predict the next observation; the same RNN with the time gap to the next observation as an extra
input. Table 2: RMSE of each model's predictions at the 100 extrapolation times of the test set.
Table 2's "Latent ODE" takes the public example's two-layer dynamics, a GRU recognition network,
random restarts and a warm restart of its learning-rate schedule (CHOICES); the latent ODEs
without them are rows beside it.
"""
import os
import re

import numpy as np
from autograd.misc import flatten

from reproduce.common import (Run, config_diff, cpus, in_processes, jsonable, now,
                              partial_note, positive, read_json, seed_arg)
from reproduce.latent import (PAPER_TOL, SPEED_REPEATS, add_solver_args, measure_solvers,
                              solver_from_args, train, training_summary)

from .data import N_OBS, SPIRAL, extrapolation_coverage, make_dataset, observed
from .figures import figure_9, figure_10, figure_training
from .models import (HIDDEN_MLP, HIDDEN_RNN, LABELS, LATENT, LATENT_MODELS, LATENT_ODE,
                     MAP_LABEL, MODELS, RNN_MODELS, TRUE_GAPS_LABEL,
                     X_SCALE, decode, evaluate, fit_z0, init_latent_ode, init_rnn_baseline,
                     latent_ode_objective, mean_gap, posterior, rmse, rnn_objective, score)


# What each mode trains. Per model: iterations, Adam's learning rate decaying exponentially to
# lr_final, the cap on the gradient's global norm, the minibatch (None: all training series),
# how many of the seeds train it (None: all), and for the latent ODE what its recognition network
# reads in training (models.latent_ode_objective's encode_cut), its dynamics' hidden widths and
# how many random starts it picks from by validation after start_iters steps (latent.train's
# restarts; start_iters per mode in SETTINGS), the method of its adjoint solve if not
# ADJOINT_METHOD, its recognition network's cell (models.ENCODERS) if not the vanilla RNN, and
# "draws": the model (or "pilot_" + a pilot) whose units' generators it draws from, if not its
# own (so that a pilot's units, trained from those draws, can become its own; an extending
# model's first stage draws from its own model's; not in the checkpoints' configuration,
# which the promoted units' must match: a change of it needs fresh checkpoints), and
# "extends": the model whose finished unit of the same n and seed it trains on from
# (latent.train's extends: a warm restart of the schedule's last part), that unit trained first
# in the same unit of work (so it is no unit of its own: FIRST_STAGES).
# The caps sit above the gradient norms of steady training (measured: RNNs 25-400 per series,
# the latent ODE 300-900), so that they cut only the spikes.
_LATENT, _LATENT_CUT = dict(lr=1e-2, lr_final=1e-4, clip=1000.0, batch_size=100), 0.5
TRAINING = {
    "rnn": dict(lr=1e-2, lr_final=1e-4, clip=100.0, batch_size=None, seeds=3),
    "rnn_dt": dict(lr=1e-2, lr_final=1e-4, clip=100.0, batch_size=None, seeds=None),
    "latent_ode": dict(_LATENT, encode_cut=_LATENT_CUT, seeds=3),
    "latent_ode_elbo": dict(_LATENT, encode_cut=None, seeds=1),
    "latent_ode_2l": dict(_LATENT, encode_cut=_LATENT_CUT, dyn_hidden=[HIDDEN_MLP, HIDDEN_MLP],
                          starts=3, adjoint_method="rkf23", seeds=3),
}
TRAINING["latent_ode_gru"] = dict(TRAINING["latent_ode_2l"], encoder="gru", starts=6,
                                  draws="latent_ode_2l", seeds=None)
TRAINING["latent_ode_extended"] = dict(TRAINING["latent_ode_gru"], extends="latent_ode_gru",
                                       draws="pilot_latent_ode_extended")
FIRST_STAGES = {t["extends"] for t in TRAINING.values() if "extends" in t}
UNIT_MODELS = tuple(m for m in MODELS if m not in FIRST_STAGES)  # the models with units
SETTINGS = {
    "smoke": dict(n_spirals=40, iters=dict(rnn=5, rnn_dt=5, latent_ode=5, latent_ode_elbo=5,
                                           latent_ode_2l=5, latent_ode_gru=5,
                                           latent_ode_extended=8),
                  tol=1e-5, ckpt_every=2, validate_every=2, start_iters=2, rnn_pilot_iters=5),
    "quick": dict(n_spirals=200,
                  iters=dict(rnn=900, rnn_dt=900, latent_ode=400, latent_ode_elbo=400,
                             latent_ode_2l=400, latent_ode_gru=400,
                             latent_ode_extended=600),
                  tol=1e-5, ckpt_every=50, validate_every=50, start_iters=100,
                  rnn_pilot_iters=900),
    "full": dict(n_spirals=1000,
                 iters=dict(rnn=18000, rnn_dt=18000, latent_ode=20000, latent_ode_elbo=20000,
                            latent_ode_2l=20000, latent_ode_gru=20000,
                            latent_ode_extended=30000),
                 tol=1e-5, ckpt_every=250, validate_every=250, start_iters=1500,
                 rnn_pilot_iters=9000),
}
# Candidate changes to one of Table 2's models ("model", latent_ode if not given), each trained
# by --pilot as its own units (per seed, n = 30 unless --train-only-n says otherwise) beside
# Table 2, which they leave alone. Everything else is that model's training, from the generator
# of Table 2's unit of that model, seed and n ("shares": which of that unit's random draws the
# pilot's then are). Overrides are TRAINING's keys but extends (a pilot trains its own unit in
# one stage, of a model that extends none), and iters_factor: the pilot's iterations are the
# mode's times this (the learning rate's decay spread over them; not in the checkpoints'
# configuration, whose n_iters says it). The RNN pilots are the learning-rate and iteration
# search; their lengths are multiples of the mode's rnn_pilot_iters, Table 2's RNN iterations
# when they ran, so that they stay the runs they were whatever Table 2 takes.
_GRU = TRAINING["latent_ode_gru"]
# the share of its first stage's iterations the Latent ODE's warm restart trains again
_WARM = (SETTINGS["full"]["iters"]["latent_ode_extended"]
         / SETTINGS["full"]["iters"]["latent_ode_gru"] - 1)
RNN_SHARES = "every draw (its initial parameters; full batches: no other noise)"
_BASE = SETTINGS["full"]["rnn_pilot_iters"]
_BASE_ABOUT = (f"the RNN pilots' base length ({_BASE} iterations in --full), the same learning "
               "rates (decaying over them): the Table 2 protocol the other RNN pilots were "
               "measured against; in --full its committed units are that protocol's Table 2 "
               "units, relabelled")
PILOTS = {
    "two_layer_dynamics": {
        "overrides": {"dyn_hidden": [HIDDEN_MLP, HIDDEN_MLP]},
        "about": f"dynamics {LATENT}-{HIDDEN_MLP}-{HIDDEN_MLP}-{LATENT} ELU, the authors' public "
                 "example's (the paper: one hidden layer)",
        "shares": "the draws before its first changed layer (the recognition network and the "
                  "dynamics' first layer); the later parameters and the training noise differ"},
    "encode_cut_0.2": {
        "overrides": {"encode_cut": 0.2},
        "about": "the recognition network reads up to a time drawn from the last 80% of the "
                 f"window (Table 2's: the last {1 - _LATENT_CUT:.0%}), so that training asks "
                 "z0 to carry a series up to 80 points past what was read",
        "shares": "every draw: Table 2's initial parameters, minibatches, posterior samples and "
                  "encoder cuts (only the cut's range differs)"},
    "gru_encoder": {
        "model": "latent_ode_2l",
        "overrides": {"encoder": "gru"},
        "about": f"the recognition network a GRU with {HIDDEN_RNN} hidden units (the paper: 'an "
                 "RNN with 25 hidden units'; the authors' public example: a vanilla tanh RNN)",
        "shares": "each start's draws of the vanilla RNN's weights (the GRU's candidate layer "
                  "and read-out); its gates, the dynamics and decoder and the training noise "
                  "differ"},
    **{f"{model}_base_iterations": {
        "model": model,
        "overrides": {},
        "about": _BASE_ABOUT,
        "shares": RNN_SHARES}
       for model in RNN_MODELS},
    "rnn_dt_third_iterations": {
        "model": "rnn_dt",
        "overrides": {"iters_factor": 1 / 3},
        "about": "a third of the RNN pilots' base length, the same learning rates (decaying "
                 f"over them): Table 2's RNN protocol before {_BASE} iterations",
        "shares": RNN_SHARES},
    **{f"rnn_dt_lr_{lr:g}": {
        "model": "rnn_dt",
        "overrides": {"lr": lr, "lr_final": lr / 100, "iters_factor": 1 / 3},
        "about": f"Adam's learning rate {lr:g} decaying to {lr / 100:g} (Table 2's: "
                 f"{TRAINING['rnn_dt']['lr']:g} to {TRAINING['rnn_dt']['lr_final']:g}), at a "
                 "third of the RNN pilots' base length (compare rnn_dt_third_iterations)",
        "shares": RNN_SHARES}
       for lr in (3e-3, 3e-2, 1e-1)},
    **{f"rnn_dt_{word}_iterations": {
        "model": "rnn_dt",
        "overrides": {"iters_factor": factor},
        "about": f"{word.replace('_', ' ')} the RNN pilots' base length, the same learning "
                 "rates (decaying over them): whether the base length stopped short of the "
                 "best" + ("; Table 2's length since (Table 2's RNN + dt units of n = 30 seeds "
                           "0-2 and n = 50 seed 0 are this pilot's, relabelled)"
                           if factor * _BASE == SETTINGS["full"]["iters"]["rnn_dt"] else ""),
        "shares": RNN_SHARES}
       for word, factor in (("twice", 2), ("four_times", 4))},
    "rnn_dt_lr_0.03_full": {
        "model": "rnn_dt",
        "overrides": {"lr": 3e-2, "lr_final": 3e-4},
        "about": f"Adam's learning rate 0.03 decaying to 0.0003 (Table 2's: "
                 f"{TRAINING['rnn_dt']['lr']:g} to {TRAINING['rnn_dt']['lr_final']:g}) over "
                 "the RNN pilots' base length: the best rate of the shorter pilots at that "
                 "length (compare rnn_dt_base_iterations)",
        "shares": RNN_SHARES},
}
# The backward solve's method: its step size carries across output times. On a training gradient
# at the training tolerance (benchmarks/spirals_adjoint.py) rkf23 gives the gradient dopri5 gives
# (both within 3e-5 of a tight solve) with 0.56x its backward NFE; the units trained before that
# measurement keep dopri5, latent_ode_2l takes rkf23 (TRAINING).
ADJOINT_METHOD = "dopri5"

CHOICES = {
    "spirals": "Archimedean arms of the authors' public example: a dense time grid s of "
               f"{SPIRAL['n_dense']} points on [0, 6 pi]; clockwise r = a + 50 b / (6 pi + 1 - s) "
               "at angle 6 pi + 1 - s centred at (-5, 0); counter-clockwise r = a + b s at angle "
               f"s centred at (5, 0); a = {SPIRAL['a']:g}, b = {SPIRAL['b']:g}",
    "directions": "exactly half of each of the training, validation and test sets clockwise, "
                  "half counter-clockwise",
    "starting points": f"a validation or test spiral is {SPIRAL['window'] + SPIRAL['extrap']} "
                       "consecutive points of its arm, starting at an index drawn from "
                       f"0..{SPIRAL['n_dense'] - SPIRAL['window'] - SPIRAL['extrap']}; a training "
                       f"spiral is observed only on its first {SPIRAL['window']} points and "
                       f"starts at 0..{SPIRAL['n_dense'] - SPIRAL['window']}, so that the training "
                       "windows can cover the whole arm, where the test series are extrapolated "
                       "included (see training coverage); no two spirals of a direction start "
                       "at the same point",
    "time": "series time t_j = j * 6 pi / 999 (the dense grid's step), t_0 = 0 at the window's "
            f"first point; observation window t_0..t_{SPIRAL['window'] - 1}, extrapolation "
            f"t_{SPIRAL['window']}..t_{SPIRAL['window'] + SPIRAL['extrap'] - 1}",
    "noise": f"i.i.d. Gaussian noise, std {SPIRAL['noise_std']:g} (the public example), on every "
             "point",
    "irregular sampling": "n of the window's points drawn without replacement per spiral, "
                          "independently for each n, then sorted",
    "split": "10% of the spirals for test and 10% for validation, the rest for training (fixed "
             "data seed 0); the seeds change initialisation and training noise only",
    "RMSE": "root of the mean squared error over test spirals, the extrapolation times and both "
            "coordinates, against the noise-free points (Table 2's published numbers can only "
            "be noise-free ones if the paper's noise std was the public example's, which the "
            "paper does not give: against the noisy points no model scores below about the "
            "noise std); against the noisy points beside it",
    "model selection": "each model's parameters at the validation check (every validate_every "
                       "iterations) with the lowest validation RMSE against the noisy points "
                       "(what an experimenter can measure); the last iterate's test RMSE is kept "
                       "in the results too",
    "latent ODE": f"Table 2's 'Latent ODE': recognition network a GRU, {HIDDEN_RNN} hidden (the "
                  "paper: 'an RNN with 25 hidden units'; the authors' public example: a tanh "
                  "RNN), input [x_i, t_i - t_(i-1)] read from the last observation back to the "
                  "first (t_0 = 0 before the first), linear read-out to mean and log-variance "
                  f"of q(z0); latent {LATENT}; dynamics {LATENT}-{HIDDEN_MLP}-{HIDDEN_MLP}-"
                  f"{LATENT} ELU (the public example's; the paper: one hidden layer); decoder "
                  f"{LATENT}-{HIDDEN_MLP}-2 ReLU; Gaussian likelihood with fixed std "
                  f"{SPIRAL['noise_std']:g} (the data noise, as in the public example); prior "
                  "N(0, I); ELBO with one reparameterised sample per series and the KL in "
                  "closed form; predictions from z0 = the posterior mean, solved over "
                  "t_0..t_199 and decoded (Figure 9(b) decodes a posterior sample, as the "
                  "paper's caption says)",
    "latent ODE objective": "the paper trains the latent ODE as a VAE on the observed window: "
                            "its recognition network reads every observation and the "
                            "likelihood scores them all (the 'window ELBO' row, the first "
                            "seed only). Nothing in that objective asks z0 to carry a series "
                            "past its window, and in a pilot at n = 30 its validation RMSE "
                            "stalled for thousands of iterations while its training loss still "
                            "fell. Every other latent row is trained so that each series' "
                            "recognition network reads only its observations up to a time drawn "
                            "uniformly from the last "
                            f"{1 - TRAINING[LATENT_ODE]['encode_cut']:.0%} of the window, the "
                            "likelihood still scoring all of them; at test time it reads every "
                            "observation",
    "latent ODE rows": f"'{LABELS['latent_ode']}' is the paper's architecture (dynamics "
                       f"{LATENT}-{HIDDEN_MLP}-{LATENT} ELU, the public example's tanh RNN "
                       "encoder) trained once per seed. The n = 30 pilots below then pointed "
                       f"to four changes, taken in two rows: '{LABELS['latent_ode_2l']}' "
                       "has two-layer dynamics, whose flow the observation window pins far "
                       "better (pilot two_layer_dynamics: at two of its three seeds its z0 "
                       "fitted to the noise-free window extrapolates far better than that of "
                       "the one one-layer model so measured, pilot encode_cut_0.2's seed 0; "
                       "its by_seed inference gaps), and "
                       "random restarts, as one of that pilot's seeds stalled in a poor basin "
                       "early: the unit trains `starts` draws for the first start_iters steps "
                       "of the schedule (training), and the one with the lowest validation RMSE "
                       "goes on to the end with its optimiser state (the other starts' time "
                       f"counted in its training time); '{LABELS['latent_ode_gru']}' has "
                       "besides a GRU encoder, which lowered two of three seeds' RMSE (pilot "
                       "gru_encoder), and 6 starts where that row has 3: the second seed (seed "
                       "1) had stayed in a poor basin because all 3 of its starts ended the "
                       "start phase there, and with 6 starts each seed had a good one. 'Latent "
                       "ODE' is that model trained on by a warm restart (latent ODE training). "
                       "The rows with restarts solve the adjoint by rkf23 (see solver). "
                       f"'{LABELS['latent_ode_gru']}' draws from the generators of the units of "
                       f"'{LABELS['latent_ode_2l']}' of the same n and seed (as pilot "
                       "gru_encoder does: its first 3 starts are that pilot's). Some of its "
                       "units were first trained as the units of a pilot with its settings and "
                       "draws (gru_encoder_6_starts) and then renamed: such a pilot trains this "
                       "model's units to the last digit (tested)",
    "latent ODE training": f"Adam on minibatches of {_GRU['batch_size']} training series, its "
                           f"learning rate decaying exponentially from {_GRU['lr']:g} to "
                           f"{_GRU['lr_final']:g} over the iterations (training; with restarts "
                           "each start trains the schedule's first start_iters steps), the "
                           "gradient's global norm capped at clip, the parameters of the best "
                           "validation check kept. Most units of "
                           f"'{LABELS['latent_ode_gru']}' selected a check in the last quarter of "
                           "their run (the selection table, counted under it): they had not "
                           "converged. So 'Latent "
                           "ODE' trains on from each of them (its first stage, trained in the "
                           "same unit of work) for half their iterations again, a warm restart: "
                           "the learning rate runs the schedule's last half again "
                           f"({_GRU['lr'] * (_GRU['lr_final'] / _GRU['lr']) ** (1 - _WARM):g} "
                           f"decaying to {_GRU['lr_final']:g}), Adam's moments start afresh, and "
                           "validation chooses among the checks of both stages. The restart "
                           "lowered the mean RMSE at each n (by how much: under the selection "
                           "table); at n = 50 seed 0 kept its check of step 7250, a poor basin "
                           "that longer training did not leave. Most of its units again "
                           "selected a check in their last quarter, so even this length may "
                           "stop short of convergence. Its "
                           "units of seeds 0-2 were first trained as the units of a pilot with "
                           "these settings (latent_ode_extended) and then renamed; it draws its "
                           "second stage's training noise from that pilot's generators (draws), "
                           "so that a fresh run retrains them. That pilot was scored on the "
                           "test spirals at every n before the warm restart was taken, so no "
                           "test cell of 'Latent ODE' is out of sample for that choice (its "
                           "record went with the rename: its scores are that row's seeds "
                           "0-2). Its "
                           "starts and "
                           "start_iters (training) are its first stage's",
    "RNN baselines": f"vanilla tanh RNN, {HIDDEN_RNN} hidden, reading the observations "
                     "forwards, linear "
                     "read-out to the mean and log-std of a Gaussian over the next observation, "
                     "trained by its negative log-likelihood (teacher forcing); RNN + dt also "
                     "gets the gap t_(i+1) - t_i to the observation it predicts. Extrapolation: "
                     "after the last observation each RNN runs free, its predictions fed back, "
                     "its k-th step placed at t_last + k g (g: the mean gap between its training "
                     "observations, about 100/n grid steps; the RNN + dt is told g), and its "
                     "path from the last observation on is interpolated linearly onto the "
                     "extrapolation times. "
                     "The row 'RNN + dt, fed the true gaps' scores the same units run "
                     "free with the true gap to each extrapolation time as input (t_100 - "
                     "t_last, then one grid step: gaps unlike most of its training's at n < "
                     "100), with no interpolation. The paper reports one RNN row: it is "
                     "compared with the RNN + dt, the version the paper built for irregular "
                     "observations",
    "RNN training": "Adam on full batches (all training series), its learning rate decaying "
                    "exponentially from lr to lr_final over the iterations (training), the "
                    "gradient's global norm capped at clip, the parameters of the best "
                    "validation check kept. The learning rate and the iterations come from the "
                    "RNN + dt pilots (the pilots table, with each pilot's iterations; their "
                    f"lengths are multiples of {_BASE}, Table 2's before them): at n = 30, "
                    f"seed 0, learning rates 3e-3 to 1e-1 at {_BASE // 3} iterations beside "
                    f"1e-2 at {_BASE // 3} (rnn_dt_third_iterations: the protocol before); of "
                    "those 3e-2 did best, 3e-3 and 1e-1 worse, and 1e-2 at "
                    f"{_BASE} (rnn_dt_base_iterations) did better than any of them by more than "
                    f"3e-2 gained, and better than 3e-2 at {_BASE} (rnn_dt_lr_0.03_full: 'full' "
                    f"for the {_BASE} of then), so 1e-2 stays. At {_BASE} most RNN units "
                    f"selected their last check: they had not converged. {2 * _BASE} "
                    "(rnn_dt_twice_iterations, n = 30 seeds 0-2 and n = 50 seed 0) did better "
                    f"at each of its seeds, and {4 * _BASE} (rnn_dt_four_times_iterations, n = "
                    "30 seed 0) only a little better again, selecting a check before its last: "
                    "at n = 30 it levels off, so Table 2 trains both RNNs "
                    f"{SETTINGS['full']['iters']['rnn_dt']} iterations ({4 * _BASE} would cost "
                    "twice as much again: Table 2's RNN + dt rows may sit above what longer "
                    "training gives, by about that pilot's gain at n = 30). That levelling off "
                    "was measured at n = 30 only: at n = 100 the RNN units' last quarter "
                    "lowered their best validation RMSE several times as much as at n = 30 "
                    "(the selection table, averaged under it), so there longer training would "
                    "more likely lower both RNN rows further. Table 2's "
                    "RNN + dt units at "
                    "n = 30 seeds 0-2 and at n = 50 seed 0 are the units of "
                    "rnn_dt_twice_iterations, relabelled (a pilot with no other change "
                    "trains a Table 2 unit to the last digit: tested), and the units of the "
                    f"base-length pilots are the Table 2 units of the {_BASE}-iteration "
                    "protocol, relabelled. A one-seed pilot "
                    "also carries float noise: rnn_dt_third_iterations shares every draw and "
                    "setting of the protocol before it, yet did not retrace that unit's score, "
                    "since a last-digit difference (another BLAS thread setup) a few dozen "
                    "steps in grows through training. The plain RNN takes the same training: at "
                    f"{SETTINGS['full']['iters']['rnn']} iterations it did better than at "
                    f"{_BASE} at n = 50 and 100, not at n = 30 (its {_BASE}-iteration units are "
                    "pilot rnn_base_iterations). For how the RNN + dt trained this long compares "
                    "with our Latent ODE, see the comparisons under Table 2. The "
                    f"paper's RNN row lies above even our RNN + dt after {_BASE // 3} iterations "
                    "(rnn_dt_third_iterations, n = 30). The paper gives no training details "
                    "for its RNN; a baseline trained far less than ours would explain the gap",
    "baselines": "Last observation: the last observed (noisy) point repeated at every "
                 "extrapolation time; Linear extrapolation: a least-squares line through the "
                 "last 5 observations against time",
    "input scaling": f"every RNN (the recognition RNN and both baselines) reads x / {X_SCALE:g} "
                     f"and time gaps in units of the grid step 6 pi / {SPIRAL['n_dense'] - 1}; "
                     "the baselines' predicted means and standard deviations are scaled back by "
                     f"{X_SCALE:g} (the latent ODE's decoder "
                     "works in data units, as in the public example)",
    "union of times": "the latent ODE solves each batch once on the sorted union of its "
                      "spirals' observation times and gathers each spiral's own rows",
}


FULL_SEEDS = tuple(range(7))  # --full's training seeds (its units and Table 2's mean over them)


def add_args(parser):
    add_solver_args(parser)
    parser.add_argument("--seeds", type=seed_arg, nargs="+", default=None,
                        help="training seeds, each a separate model (default: --seed in "
                             f"--smoke/--quick, {FULL_SEEDS[0]}-{FULL_SEEDS[-1]} in --full)")
    parser.add_argument("--train-only-n", type=int, nargs="+", choices=N_OBS, default=None,
                        help="train (or, with --resume, continue) only the models for these "
                             "numbers of observed points and stop: several such runs can share "
                             "the cores; a later --resume run without it then only evaluates")
    parser.add_argument("--train-only", nargs="+", choices=UNIT_MODELS, default=None,
                        help="train only these models' units and stop (as --train-only-n); "
                             "latent_ode_extended's unit trains latent_ode_gru first, which has "
                             "no unit of its own")
    parser.add_argument("--eval-workers", type=positive(int), default=cpus(),
                        help="score Table 2's units (and --inference-gap's fits) in this many "
                             "processes side by side, each on one BLAS thread (1: in this "
                             "process); the numbers do not depend on it (default: the CPUs, "
                             "%(default)s; a run that trains and stops, and a --pilot run, "
                             "score in this process)")
    parser.add_argument("--inference-gap", action="store_true",
                        help="after Table 2, also write inference_gap.json: each seed's "
                             "latent ODE extrapolating from z0 fitted to the test points "
                             "(minutes per n and seed; see inference_gap)")
    parser.add_argument("--pilot", nargs="+", choices=list(PILOTS), default=None,
                        help="instead of Table 2, train (or, with --resume, continue) a model "
                             "of Table 2 with these candidate changes at n = 30 (or "
                             "--train-only-n), "
                             "for --seeds (default: the first seed and every seed already "
                             "trained), and write pilot_NAME.json: its scores (and a latent "
                             "ODE's inference gap; see PILOTS), keeping the seeds and n that "
                             "earlier runs scored while their final weights stay the same")


def _seeds(run):
    seeds = run.args.seeds or run.pick([run.seed], [run.seed], list(FULL_SEEDS))
    if len(set(seeds)) != len(seeds):
        run.usage_error(f"--seeds repeats a seed: {seeds}")
    return seeds


def _model_seeds(run, model):
    return _seeds(run)[:TRAINING[model]["seeds"]]


def unit_name(model, n, seed, pilot=None):
    """A unit's name (its checkpoint's); a pilot's is its own, beside Table 2's."""
    return f"pilot_{pilot}_n{n}_seed{seed}" if pilot else f"{model}_n{n}_seed{seed}"


def parse_unit_name(name):
    """(model, n, seed) of a Table 2 unit's name: unit_name's inverse."""
    model, n, seed = re.fullmatch(r"(.+)_n(\d+)_seed(\d+)", name).groups()
    return model, int(n), int(seed)


def _grid(run):
    """unit name -> (model, n, seed) of each unit of work of Table 2 (UNIT_MODELS: a first stage
    is trained inside the unit that extends it, stages), in training order: seed by seed, so
    that a run cut short has whole seeds."""
    return {unit_name(m, n, s): (m, n, s) for s in _seeds(run) for n in N_OBS
            for m in UNIT_MODELS if s in _model_seeds(run, m)}


def stages(model):
    """The models a unit of `model` trains, in order: the models it extends, then itself."""
    source = TRAINING[model].get("extends")
    return (stages(source) if source else []) + [model]


def coverage_text(data):
    """What share of the test extrapolation points the training windows cover, in words."""
    cover = extrapolation_coverage(data)
    share = lambda key: " and ".join(  # noqa: E731
        f"{cover[d][key]:.1%} ({d})" for d in ("counter-clockwise", "clockwise"))
    return (f"the training series' observation windows cover {share('covered')} of the test "
            f"series' extrapolation points; {share('arm end')} of those lie on the arm's last "
            f"{SPIRAL['window']} points, which no training series would see if training series "
            "started only where test series may")


def units(run):
    """The units this run trains: one per model of UNIT_MODELS, number of observations and seed
    (its checkpoint's name), narrowed by --only, --train-only and --train-only-n. A --pilot run
    trains its own units in its one process (pilots), so it has none to hand out."""
    if run.args.pilot:
        run.usage_error("--pilot trains its units in its one process: no units to list or "
                        "to run with --executor")
    grid, chosen = _grid(run), None
    if run.args.train_only or run.args.train_only_n:
        chosen = [k for k, (m, n, _) in grid.items()
                  if m in (run.args.train_only or UNIT_MODELS)
                  and n in (run.args.train_only_n or N_OBS)]
    return run.select(list(grid), chosen)


def rnn_step(data, n):
    """The time a free-running step of the RNNs stands for at n observations (rnn_predict's
    `step`): the mean gap between the training series' observations."""
    return mean_gap(observed(data, n, data["train"])[1])


def train_unit(run, cfg, data, solver, model, n, seed, pilot=None):
    """Train one model for one n and one seed (resumable); returns its state, state["best"]
    holding the parameters with the lowest validation RMSE (against the noisy points). pilot:
    a PILOTS key, `model` (the pilot's) with that change (its own unit)."""
    xs, times = observed(data, n, data["train"])
    overrides, hyper = training_overrides(pilot), unit_training(model, pilot)
    step = rnn_step(data, n)
    config = {"batch_size": hyper["batch_size"], "n_spirals": cfg["n_spirals"], **overrides}
    if model in LATENT_MODELS:
        for key in ("dyn_hidden", "adjoint_method", "encoder", "extends"):
            if key in hyper:
                config[key] = hyper[key]
        if "adjoint_method" in hyper:
            solver = dict(solver, adjoint_method=hyper["adjoint_method"])
        init = lambda rng: init_latent_ode(  # noqa: E731
            rng, hyper.get("dyn_hidden", HIDDEN_MLP), hyper.get("encoder", "rnn"))
        objective = latent_ode_objective(xs, times, solver, hyper["batch_size"],
                                         hyper["encode_cut"])
        config["encode_cut"] = hyper["encode_cut"]
    else:
        init = lambda rng, d=model == "rnn_dt": init_rnn_baseline(rng, d)  # noqa: E731
        objective = rnn_objective(xs, times, model == "rnn_dt")

    def validate(params):
        return score(model, params, data, n, data["val"], solver, step)["rmse_noisy"]

    source = hyper.get("extends")
    extends = (unit_name(source, n, seed), cfg["iters"][source]) if source else None
    return train(run, unit_name(model, n, seed, pilot), init, objective,
                 iterations(cfg, model, pilot), hyper["lr"], cfg["ckpt_every"], seed=seed,
                 lr_final=hyper["lr_final"], clip=hyper["clip"], validate=validate,
                 validate_every=cfg["validate_every"], config=config,
                 rng_key=unit_name(hyper.get("draws", model), n, seed),
                 starts=hyper.get("starts", 1), start_iters=cfg["start_iters"], extends=extends)


def training_overrides(pilot=None):
    """A pilot's changes to TRAINING's keys (its iters_factor is iterations')."""
    overrides = PILOTS[pilot]["overrides"] if pilot else {}
    return {k: v for k, v in overrides.items() if k != "iters_factor"}


def unit_training(model, pilot=None):
    """TRAINING's settings of a unit of `model`, with a pilot's changes."""
    hyper = dict(TRAINING[model], **training_overrides(pilot))
    if pilot and "extends" in hyper:
        raise ValueError(f"pilot {pilot}: a pilot trains in one stage, so it can neither change "
                         f"a model that extends another nor extend one ({model})")
    return hyper


def iterations(cfg, model, pilot=None):
    """How many iterations a unit of `model` (or of a pilot of it) trains in this mode."""
    if not pilot:
        return cfg["iters"][model]
    base = cfg["iters"][model] if model in LATENT_MODELS else cfg["rnn_pilot_iters"]
    return round(base * PILOTS[pilot]["overrides"].get("iters_factor", 1))


# the most L-BFGS iterations of a z0 fit (MAP rows, pilots, inference_gap); full: room for the
# fits to stop by their own tests (the results record how each stopped)
FIT_ITERS = {"smoke": 5, "quick": 100, "full": 1000}


def inference_gap(params, data, n, solver, fit_solver, maxiter):
    """Where a latent ODE's extrapolation error comes from. Its noise-free test RMSE over the
    extrapolation and inside the window, from z0 = the recognition network's posterior mean
    (Table 2's), and from z0 fitted (fit_z0, from that mean) to: the same n noisy observations
    (the closest fit to what the network reads, noise included: no prior), the window's
    noise-free points (inference with the noise taken away), all window and extrapolation
    noise-free points (what the trained dynamics and decoder can represent at all)."""
    rows, w, t = data["test"], SPIRAL["window"], data["t"]
    xs, times = observed(data, n, rows)
    clean = data["clean"][rows]
    every = np.broadcast_to(np.arange(len(t)), clean.shape[:2])
    mu = np.asarray(posterior(params, xs, times)[0])
    targets = {"noisy observations": (data["obs_idx"][n][rows], xs),
               "noise-free window": (every[:, :w], clean[:, :w]),
               "noise-free window and extrapolation": (every, clean)}
    starts = {"recognition network": mu}
    starts.update({f"fitted to the {name}": fit_z0(params, mu, t, index, target, fit_solver,
                                                    maxiter)
                   for name, (index, target) in targets.items()})
    out = {}
    for name, z0 in starts.items():
        path = decode(params, z0, t, solver)[0]
        out[name] = {"rmse_clean": rmse(path[:, w:], clean[:, w:]),
                     "rmse_clean_window": rmse(path[:, :w], clean[:, :w])}
    return out


def seeds_mean(gaps):
    """The mean over seeds of inference_gap's scores (a list of its returns)."""
    return {start: {key: float(np.mean([g[start][key] for g in gaps])) for key in scores}
            for start, scores in gaps[0].items()}


def _pilot_seeds(run, name, n):
    """The seeds a pilot runs: --seeds if given, else the first seed and every seed whose unit of
    this pilot and n has a checkpoint (its own or, still in its random restarts, one of its
    starts') or final weights (so that evaluating or resuming a pilot takes all of its seeds)."""
    if run.args.seeds:
        return _seeds(run)
    pattern = re.compile(re.escape(unit_name(None, n, "", name)) + r"(\d+)(?:_start\d+)?\.ckpt")
    found = {int(m.group(1)) for folder in (run.ckpt_dir, run.weights_dir)
             if os.path.isdir(folder) for m in map(pattern.fullmatch, os.listdir(folder)) if m}
    first = _seeds(run)[0]
    return [first] + sorted(found - {first})


def pilots(run, cfg, data, solver, eval_solver):
    """Train and score each --pilot: a Table 2 model with one candidate change, at each n of
    --train-only-n (30 if not given) and each of its seeds (_pilot_seeds); one pilot_NAME.json
    per pilot, its cells as Table 2's (seed_cell) beside Table 2's same seeds, each seed's
    scores (and a latent ODE's MAP scores and inference gap) under by_seed. The seeds scored
    earlier at other n or seeds stay in the record while their weights do (_earlier_scores),
    so that runs of a pilot's units one by one add up to its record."""
    maxiter = FIT_ITERS[run.mode]
    for name in run.args.pilot:
        model = PILOTS[name].get("model", "latent_ode")
        latent, planned = model in LATENT_MODELS, iterations(cfg, model, name)
        hyper = dict(unit_training(model, name), iterations=planned)
        if hyper.get("starts", 1) > 1:
            hyper["start_iters"] = cfg["start_iters"]
        training = f"Table 2's {LABELS[model]} with the change: {hyper}"
        scored = {}  # {n: {seed: by_seed entry}}
        for n in run.args.train_only_n or [30]:
            step = None if latent else rnn_step(data, n)
            for seed in _pilot_seeds(run, name, n):
                state = train_unit(run, cfg, data, solver, model, n, seed, pilot=name)
                unit = unit_name(model, n, seed, name)
                if state["step"] == 0:
                    run.usage_error(f"--pilot {name}: {unit} has no checkpoint (with --resume) "
                                    f"or final weights in {run.weights_dir} to evaluate")
                result = evaluate_unit(
                    model, state, data, n, eval_solver, seed, step,
                    refine=dict(solver=solver, maxiter=maxiter) if latent else None)
                entry = scored.setdefault(n, {})[seed] = {
                    "unit": unit, "table2_unit": unit_name(model, n, seed),
                    "iterations": state["step"], "of": planned, **result,
                    "training": training_summary(state),
                    "weights_sha256": _scored_weights(run, unit, state, planned),
                    "scored": {"command": run.command, "date": now()}}
                if latent:
                    entry["inference_gap"] = inference_gap(
                        best_params(state), data, n, eval_solver, solver, maxiter)
                print(f"spirals: pilot {name} n = {n} seed {seed}: noise-free RMSE "
                      f"{result['rmse_clean']:.4f} ({state['step']} of {planned} "
                      "iterations)", flush=True)
        for n, entries in _earlier_scores(run, name, planned, training, scored).items():
            scored.setdefault(n, {}).update(entries)
        by_n = {str(n): _pilot_cell(scored[n], planned, latent) for n in sorted(scored)}
        draws = ("each seed's parameters and training noise "
                 + ("(minibatches, posterior samples, encoder cuts) " if latent else "")
                 + "come from the generator of Table 2's unit of "
                 f"{TRAINING[model].get('draws', model)} of the same n and seed"
                 + (" (with restarts: of that unit's start of the same number)"
                    if latent else ""))
        run.save_results({"pilot": name, "base": LABELS[model],
                          "overrides": PILOTS[name]["overrides"], "by_n": by_n},
                         choices={"pilot": PILOTS[name]["about"],
                                  "training": training,
                                  "draws": f"{draws}; it shares {PILOTS[name]['shares']}",
                                  "seeds": "as Table 2's: the mean and sample sd over the seeds "
                                           "that finished (inference_gap: the mean of theirs), "
                                           "each seed's own under by_seed with the command "
                                           "that scored it and the SHA-256 of the final "
                                           "weights it scored (a later run of other seeds or "
                                           "n keeps it while those weights stay the same; the "
                                           "record's "
                                           "command, date and duration are its last run's)",
                                  **({"fits": "inference_gap: as inference_gap.json, L-BFGS "
                                              f"at most {maxiter} iterations"} if latent else {})},
                         filename=f"pilot_{name}.json")
        print(f"spirals: wrote {run.path(f'pilot_{name}.json')}", flush=True)
    return 0


def _earlier_scores(run, name, planned, training, scored):
    """The seeds of pilot `name`'s record in this run's output folder that this run did not
    score ({n: {seed: entry}} as `scored`) and may keep: from a record of this run's settings
    and training, of units that finished this pilot's iterations and whose final weights are
    still the ones scored (their SHA-256). Each one dropped is said, with why, so that it can be
    scored again."""
    record = read_json(run.path(f"pilot_{name}.json"))
    if record is None:
        return {}
    differ = config_diff(record.get("config") or {}, jsonable(run.config))
    if record["choices"].get("training") != training:
        differ.append("training")
    if differ:
        print(f"spirals: pilot {name}: the earlier record was made with other settings "
              f"({', '.join(differ)}); only this run's seeds are kept", flush=True)
        return {}
    kept = {}
    for n, cell in record["results"]["by_n"].items():
        for seed, entry in cell["by_seed"].items():
            if int(seed) in scored.get(int(n), {}):
                continue
            if entry["iterations"] < entry["of"] or entry["of"] != planned:
                why = f"it had trained {entry['iterations']} of {planned} iterations"
            elif entry.get("weights_sha256") is None:
                why = ("no digest of final weights beside its scores: scored from a "
                       "checkpoint, or before records kept one")
            elif run.final_weights(entry["unit"]).digest() != entry["weights_sha256"]:
                why = f"{entry['unit']}'s final weights are not the ones it scored"
            else:
                kept.setdefault(int(n), {})[int(seed)] = entry
                continue
            print(f"spirals: pilot {name}: n = {n} seed {seed} scored earlier is dropped "
                  f"({why}); score it again", flush=True)
    return kept


def _scored_weights(run, unit, state, planned):
    """The SHA-256 of a finished unit's final weights if they hold the parameters scored
    (best_params of `state`, which --evaluate-only may have read from a checkpoint), else None."""
    final = run.final_weights(unit)
    saved = final.load(force=True) if state["step"] >= planned else None
    same = saved and np.array_equal(flatten(best_params(saved))[0],
                                    flatten(best_params(state))[0])
    return final.digest() if same else None


def _pilot_cell(entries, planned, latent):
    """A pilot's cell at one n from its seeds' by_seed entries ({seed: entry}), as Table 2's
    (seed_cell), with a latent ODE's MAP cell and mean inference gap."""
    seeds = sorted(entries)
    entries = {s: entries[s] for s in seeds}
    steps = {s: e["iterations"] for s, e in entries.items()}
    cell = seed_cell(entries, steps, planned)
    if latent:
        cell["map_z0"] = seed_cell({s: e["map_z0"] for s, e in entries.items()}, steps, planned)
        cell["inference_gap"] = seeds_mean([entries[s]["inference_gap"] for s in cell["seeds"]])
    return dict(cell, by_seed={str(s): e for s, e in entries.items()})


def best_params(state):
    """A trained unit's parameters with the lowest validation RMSE (the last iterate's if it was
    never validated): what every test number is computed from."""
    return (state["best"] or state)["params"]


def evaluate_units(run, states, data, eval_solver, refine=None, workers=1):
    """evaluate_unit of every trained unit ({(model, n, seed): state}; refine: Table 2's MAP
    rows of the latent models) in `workers` processes (in_processes), each unit's scores printed
    as it finishes; {(model, n, seed): its result}."""
    tasks = {(model, n, seed): (model, {k: state[k] for k in SCORED_STATE}, data, n,
                                eval_solver, seed, rnn_step(data, n), refine)
             for (model, n, seed), state in states.items()}
    per_seed = {}
    for (model, n, seed), result in run.progress(
            in_processes(evaluate_unit, tasks, workers), "evaluating", total=len(tasks)):
        per_seed[model, n, seed] = result
        run.write(f"spirals: {LABELS[model]:10s} n = {n:3d} seed {seed}: " + ", ".join(
            f"{k} {v:.4f}" for k, v in result.items() if isinstance(v, float)))
    return per_seed


SCORED_STATE = ("params", "best", "validation", "step")  # what evaluate_unit reads of a state


def evaluate_unit(model, state, data, n, eval_solver, seed, step=None, refine=None):
    """A trained unit's test scores (evaluate, with map_z0's under "map_z0" given refine, and the
    RNN + dt's "true_gaps") at its best validated parameters, with the step they were taken at,
    their validation RMSE (noisy; what selected them) and the last iterate's scores."""
    result = evaluate(model, best_params(state), data, n, eval_solver, seed + 1, step, refine)
    result["best_step"] = state["best"]["step"] if state["best"] else None
    result["best_validation_rmse_noisy"] = state["best"]["score"] if state["best"] else None
    result["validation_gain_last_quarter"] = last_quarter_gain(state)
    result["last_iterate"] = score(model, state["params"], data, n, data["test"], eval_solver,
                                   step)
    for row in ("map_z0", "true_gaps"):  # Table 2's rows from the same unit
        if row in result:
            result[row]["best_step"] = result["best_step"]
    return result


LAST_QUARTER = 0.75  # a unit whose best check came after this fraction of its steps: late


def last_quarter_gain(state):
    """How much the unit's best validation RMSE fell in the last quarter of its training (the
    best check up to LAST_QUARTER of its steps less the best of all; None if never validated):
    a convergence check, since a unit still improving when it stopped gains there."""
    checks = state.get("validation") or []
    early = [c["score"] for c in checks if c["step"] <= LAST_QUARTER * state["step"]]
    return min(early) - state["best"]["score"] if early and state["best"] else None


def seed_cell(results, steps, planned):
    """One cell of Table 2 from its seeds' evaluate_unit results ({seed: result}) and training
    steps ({seed: step}): the mean and sample sd over the seeds that finished their training
    (else those that started, else all; "seeds"), the per-seed values, and the other seeds under
    unfinished_seeds with how far they trained."""
    finished = [s for s in results if steps[s] >= planned]
    used = finished or [s for s in results if steps[s] > 0] or list(results)
    rows = [results[s] for s in used]
    entry = {"seeds": used}
    unfinished = {str(s): _unfinished(results[s], steps[s], planned)
                  for s in results if s not in finished}
    if unfinished:
        entry["unfinished_seeds"] = unfinished
    for key in ("rmse_clean", "rmse_noisy"):
        values = [r[key] for r in rows]
        entry[key], entry[f"{key}_sd"] = _summary(values)
        entry[f"{key}_seeds"] = values
    for key in ("test_elbo", "test_nll", "best_step", "best_validation_rmse_noisy",
                "validation_gain_last_quarter"):
        if key in rows[0]:
            entry[f"{key}_seeds"] = [r[key] for r in rows]
    if "lbfgs" in rows[0]:
        entry["lbfgs_seeds"] = [r["lbfgs"] for r in rows]
    if "last_iterate" in rows[0]:
        entry["last_iterate_rmse_clean_seeds"] = [r["last_iterate"]["rmse_clean"] for r in rows]
    for key in ("rmse_clean_by_direction", "rmse_clean_by_horizon", "rmse_clean_window"):
        entry[f"{key}_seeds"] = [r[key] for r in rows]
    return entry


def _unfinished(result, steps, planned):
    """What Table 2 keeps of a seed left out of its mean: how far it trained, and its scores."""
    kept = {"iterations": steps, "of": planned, "best_step": result["best_step"],
            "rmse_clean": result["rmse_clean"], "rmse_noisy": result["rmse_noisy"]}
    if "last_iterate" in result:
        kept["last_iterate_rmse_clean"] = result["last_iterate"]["rmse_clean"]
    return kept


def _summary(values):
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def make_run(argv=None):
    return Run("spirals", argv, description=__doc__.split("\n\n")[0], extra_args=add_args,
               bookkeeping={"seeds", "train_only", "inference_gap", "pilot", "eval_workers"},
               selecting=lambda args: () if args.pilot else ("train_only", "train_only_n"))


def main(argv=None):
    run = make_run(argv)
    cfg, seeds, grid = SETTINGS[run.mode], _seeds(run), _grid(run)
    if run.args.pilot and (run.args.only or run.args.train_only):
        run.usage_error("--pilot trains its own units: it takes --train-only-n, not --only or "
                        "--train-only")
    solver, solver_text = solver_from_args(run.args, cfg["tol"])
    solver["adjoint_method"] = ADJOINT_METHOD
    eval_solver = dict(solver, rtol=PAPER_TOL, atol=PAPER_TOL)
    refine = dict(solver=solver, maxiter=FIT_ITERS[run.mode])
    data = make_dataset(cfg["n_spirals"])
    if run.args.pilot:
        return pilots(run, cfg, data, solver, eval_solver)
    todo, states = units(run), {}
    table2_run = not run.partial  # else it trains units and stops
    for key in todo:
        unit_model, n, seed = grid[key]
        for model in stages(unit_model):
            states[model, n, seed] = train_unit(run, cfg, data, solver, model, n, seed)
    per_seed = (evaluate_units(run, states, data, eval_solver, refine, run.args.eval_workers)
                if table2_run else evaluate_units(run, states, data, eval_solver))  # in process
    if not table2_run:
        print(f"spirals: trained {', '.join(todo)}; checkpoints in {run.ckpt_dir}")
        return 0

    table = {}
    for model in MODELS:
        rows = [(LABELS[model], lambda r: r)]
        if model in LATENT_MODELS:  # the same units, z0 by map_z0
            rows.append((MAP_LABEL.format(LABELS[model]), lambda r: r["map_z0"]))
        if model == "rnn_dt":  # the same units, fed the true gaps
            rows.append((TRUE_GAPS_LABEL, lambda r: r["true_gaps"]))
        for label, pick in rows:
            for n in N_OBS:
                model_seeds = _model_seeds(run, model)
                table.setdefault(label, {})[str(n)] = seed_cell(
                    {s: pick(per_seed[model, n, s]) for s in model_seeds},
                    {s: states[model, n, s]["step"] for s in model_seeds}, cfg["iters"][model])
    for model, label in (("last_observation", "Last observation"),
                         ("linear", "Linear extrapolation")):
        for n in N_OBS:
            r = score(model, None, data, n, data["test"], eval_solver)
            table.setdefault(label, {})[str(n)] = {
                "rmse_clean": r["rmse_clean"], "rmse_clean_sd": 0.0,
                "rmse_clean_seeds": [r["rmse_clean"]], "rmse_noisy": r["rmse_noisy"],
                "rmse_noisy_sd": 0.0, "rmse_noisy_seeds": [r["rmse_noisy"]]}

    s0 = seeds[0]
    best = {(m, n): best_params(states[m, n, s0])
            for m in MODELS for n in N_OBS}
    histories = {m: {n: states[m, n, s0]["history"] for n in N_OBS} for m in MODELS}
    figure_9(run.path("fig9.png"), data, {m: best[m, 30] for m in MODELS}, eval_solver,
             s0 + 2, step=rnn_step(data, 30))
    fig10 = figure_10(run.path("fig10.png"), data, best[LATENT_ODE, 30], eval_solver)
    figure_training(run.path("training.png"), histories)

    params30 = best[LATENT_ODE, 30]
    xs30, times30 = observed(data, 30, data["train"][:TRAINING[LATENT_ODE]["batch_size"]
                                                     or len(data["train"])])
    speed = measure_solvers(lambda sv: latent_ode_objective(xs30, times30, sv), params30,
                            sorted({solver["rtol"], PAPER_TOL}))
    tolerance_effect = [dict(tol=t, **evaluate(LATENT_ODE, params30, data, 30,
                                               dict(solver, rtol=t, atol=t), s0 + 1))
                        for t in (PAPER_TOL, 1e-6, 1e-5, 1e-4)]

    timing = {unit_name(*unit): training_summary(state) for unit, state in states.items()}
    choices = dict(CHOICES)
    choices.update({
        "data size": f"{cfg['n_spirals']} spirals: {len(data['train'])} train, "
                     f"{len(data['val'])} validation, {len(data['test'])} test",
        "training coverage": coverage_text(data),
        "iterations": "; ".join(
            f"{LABELS[m]} ({m}): {cfg['iters'][m]}"
            + (f", the first {cfg['iters'][TRAINING[m]['extends']]} of them its first stage "
               f"('{LABELS[TRAINING[m]['extends']]}')" if "extends" in TRAINING[m] else "")
            + (f", and {TRAINING[m]['starts'] - 1} discarded starts of {cfg['start_iters']}"
               if TRAINING[m].get("starts", 1) > 1 else "")
            for m in MODELS),
        "training": {m: dict(TRAINING[m], iterations=cfg["iters"][m],
                             **({"start_iters": cfg["start_iters"]} if "starts" in TRAINING[m]
                                else {})) for m in MODELS},
        "seeds": f"{len(seeds)} training seeds ({', '.join(map(str, seeds))}): Table 2 shows "
                 "the mean and the sample standard deviation over them (over those that "
                 "finished their training where some have not, over those that started where "
                 "none has; table2_rmse's \"seeds\" are the seeds averaged, the others are "
                 "kept under unfinished_seeds with how far they trained); "
                 + ", ".join(f"{LABELS[m]}: the first {TRAINING[m]['seeds']} only" for m in MODELS
                             if TRAINING[m]["seeds"] is not None)
                 + " (to save training time; the other rows, the two compared under Table 2 "
                   "among them, take every seed)",
        "z0 by MAP": "each latent model's row is repeated with z0 = the posterior mode given "
                     "the same observations: argmax of log p(x_obs | z0) + log N(z0; 0, I) under "
                     "the trained dynamics and decoder (the likelihood's fixed std "
                     f"{SPIRAL['noise_std']:g}), by L-BFGS (at most {FIT_ITERS[run.mode]} "
                     "iterations, gradients by the adjoint at the training tolerance) from the "
                     "recognition network's mean; it reads the test observations only. The "
                     "paper predicts from the recognition network (the plain rows)",
        "solver": solver_text + f"; the adjoint solved by {ADJOINT_METHOD} ("
                  + "; ".join(f"by {TRAINING[m]['adjoint_method']} for {LABELS[m]}"
                              for m in MODELS if "adjoint_method" in TRAINING[m])
                  + f"); every test number evaluated at the paper's {PAPER_TOL:g}",
        "solver measurements": "solver_speed_latent_ode_n30: seconds (the fastest of "
                               f"{SPEED_REPEATS} repeats) and NFE of one training "
                               f"gradient of {unit_name(LATENT_ODE, 30, s0)} (Table 2's "
                               "'Latent ODE' at n = 30; one minibatch) per "
                               "method, tolerance and adjoint norm; "
                               "tolerance_effect_latent_ode_n30: its test RMSE and ELBO (same "
                               "noise) evaluated at each tolerance",
    })
    if run.args.inference_gap:  # before results.json, whose duration is the whole command's
        maxiter, fitted = FIT_ITERS[run.mode], [(n, s) for n in N_OBS
                                                for s in _model_seeds(run, LATENT_ODE)]
        done = dict(run.progress(in_processes(inference_gap, {
            (n, s): (best_params(states[LATENT_ODE, n, s]), data, n, eval_solver, solver, maxiter)
            for n, s in fitted}, run.args.eval_workers), "inference gap", total=len(fitted)))
        gaps = {key: done[key] for key in fitted}  # in seed order, not the order they finished
        run.save_results({
            "inference_gap": {str(n): seeds_mean([g for (m, _), g in gaps.items() if m == n])
                              for n in N_OBS},
            "by_seed": {str(n): {str(s): g for (m, s), g in gaps.items() if m == n}
                        for n in N_OBS},
            "models": {str(n): [{"unit": unit_name(LATENT_ODE, n, s),
                                 "iterations": states[LATENT_ODE, n, s]["step"],
                                 "best_step": (states[LATENT_ODE, n, s]["best"] or {}).get("step")}
                                for m, s in fitted if m == n] for n in N_OBS},
        }, choices={"fits": f"z0 of each test spiral fitted by L-BFGS (at most {maxiter} "
                            f"iterations, squared error, gradients by the adjoint at the "
                            f"training tolerance {solver['rtol']:g}) from the recognition "
                            "network's posterior mean; every path then solved at the paper's "
                            f"{PAPER_TOL:g}; each seed's model ({LABELS[LATENT_ODE]}, its "
                            "validated best parameters) at each n, the table the mean over "
                            "the seeds (by_seed: each seed's)"},
            filename="inference_gap.json")
        print(f"spirals: wrote {run.path('inference_gap.json')}", flush=True)
    note = partial_note({unit_name(*unit): (state["step"], cfg["iters"][unit[0]])
                         for unit, state in states.items()})
    run.save_results({
        **({"note": note} if note else {}),
        "table2_rmse": table,
        "figure10": fig10,
        "training": timing,
        "solver": solver,
        "solver_speed_latent_ode_n30": speed,
        "tolerance_effect_latent_ode_n30": tolerance_effect,
    }, choices=choices)
    print(f"spirals: wrote {run.out_dir}", flush=True)
    return 0

