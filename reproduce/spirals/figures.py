"""Figures 9 and 10 and the training curves of the Table 2 models."""
import textwrap

import numpy as np

from reproduce.common import pyplot, save_figure

from .data import N_OBS, SPIRAL, observed
from .models import (LABELS, LATENT, LATENT_MODELS, LATENT_ODE, MODELS, decode,
                     decoded_direction, latent_ode_predict, posterior, rnn_predict)


def figure_9(path, data, models, solver, seed, n=30, step=None):
    plt = pyplot()
    test = data["test"]
    picks = np.array([test[data["direction"][test] == d][0] for d in (-1, 1)])
    xs, times = observed(data, n, picks)
    w = SPIRAL["window"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    rnn_recon, rnn_extrap = rnn_predict(models["rnn_dt"], xs, times, data["t"][w:], True, step)
    eps = np.random.RandomState(seed).randn(len(picks), LATENT)
    ode_path, _ = latent_ode_predict(models[LATENT_ODE], xs, times, data["t"], solver, eps)
    for ax, title, recon, extrap in (
            (axes[0], "(a) RNN + dt", rnn_recon, rnn_extrap),
            (axes[1], "(b) Latent ODE", ode_path[:, :w], ode_path[:, w:])):
        for k in range(len(picks)):
            first = k == 0
            ax.plot(*data["clean"][picks[k]].T, color="0.6", lw=1, ls="--",
                    label="ground truth" if first else None)
            ax.scatter(*xs[k].T, s=10, color="k", zorder=3,
                       label=f"{n} observations" if first else None)
            ax.plot(*recon[k].T, color="tab:blue", lw=1.5,
                    label="reconstruction" if first else None)
            ax.plot(*extrap[k].T, color="tab:red", lw=1.5, label="extrapolation" if first else None)
        ax.set_title(title)
        ax.set_xlabel("$x_1$")
        ax.set_ylabel("$x_2$")
        ax.set_aspect("equal", adjustable="datalim")
        ax.legend(fontsize=8, loc="upper left")
    xs_all, times_all = observed(data, n, test)
    _, zs = latent_ode_predict(models[LATENT_ODE], xs_all, times_all, data["t"], solver)
    for d, colour, label in ((-1, "tab:blue", "clockwise"), (1, "tab:red", "counter-clockwise")):
        rows = np.flatnonzero(data["direction"][test] == d)
        for j, r in enumerate(rows):
            axes[2].plot(zs[r, :, 0], zs[r, :, 1], color=colour, lw=0.6, alpha=0.6,
                         label=label if j == 0 else None)
    axes[2].set_title("(c) Latent trajectories (test set)")
    axes[2].set_xlabel("$z_1$")
    axes[2].set_ylabel("$z_2$")
    axes[2].legend(fontsize=8)
    fig.suptitle(f"Figure 9: spirals with {n} irregular observations (reproduction)")
    save_figure(fig, path)


def figure_10(path, data, params, solver, n=30, n_panels=6):
    """Decode z0 = the mean of the test posteriors with the dimension that best separates the
    two directions swept across the range of the test posterior means. Returns what it drew."""
    plt = pyplot()
    test = data["test"]
    xs, times = observed(data, n, test)
    mu, logvar = posterior(params, xs, times)
    direction = data["direction"][test]
    sep = np.abs(mu[direction == 1].mean(0) - mu[direction == -1].mean(0)) / mu.std(0)
    dim = int(np.argmax(sep))
    values = np.linspace(mu[:, dim].min(), mu[:, dim].max(), n_panels)
    z0 = np.repeat(mu.mean(0, keepdims=True), n_panels, axis=0)
    z0[:, dim] = values
    paths = decode(params, z0, data["t"], solver)[0]
    turns = [decoded_direction(p) for p in paths]
    fig, axes = plt.subplots(1, n_panels, figsize=(2.6 * n_panels, 3.3), layout="constrained")
    for ax, p, v, turn in zip(axes, paths, values, turns):
        sc = ax.scatter(*p.T, c=data["t"], cmap="rainbow", s=4)
        ax.set_title(f"$z_{dim + 1}(t_0)$ = {v:.2f}\n({'CCW' if turn > 0 else 'CW'})", fontsize=9)
        ax.set_xlabel("$x_1$")
        ax.set_aspect("equal", adjustable="datalim")
    axes[0].set_ylabel("$x_2$")
    fig.colorbar(sc, ax=axes, label="t", fraction=0.02)
    fig.suptitle(f"Figure 10: decoded trajectories while $z_{dim + 1}(t_0)$ varies "
                 f"(reproduction)")
    save_figure(fig, path, tight=False)
    return {"dimension": dim + 1, "values": values, "direction": turns,
            "separation_by_dimension": sep}


def figure_training(path, histories, ncols=4):
    """Each Table 2 model's training loss per n, against the training step: a grid of panels
    whose long titles wrap, with steps in thousands (30,000 would crowd the ticks)."""
    plt = pyplot()
    nrows = -(-len(MODELS) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.9 * nrows), squeeze=False,
                             layout="constrained")
    for ax, model in zip(axes.flat, MODELS):
        for n in N_OBS:
            ax.plot(histories[model][n]["iteration"], histories[model][n]["loss"],
                    label=f"n = {n}")
        ax.set_title(textwrap.fill(LABELS[model], 38), fontsize=10)
        ax.set_xlabel("iteration (thousands)")
        ax.xaxis.set_major_formatter(lambda x, _: f"{x / 1000:g}")
        ax.set_ylabel("-ELBO per series" if model in LATENT_MODELS else "NLL per series")
        ax.set_yscale("symlog")
        ax.legend(fontsize=8)
    for ax in axes.flat[len(MODELS):]:
        ax.set_visible(False)
    fig.suptitle("Training losses (Table 2 models)")
    save_figure(fig, path, dpi=110, tight=False)
