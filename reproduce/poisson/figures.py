"""Figure 8 (learned against true intensities) and the training curve."""
import numpy as np

from reproduce.common import pyplot, save_figure


def figure_8(path, data, curves, n_show=4):
    plt = pyplot()
    t_grid, learned, truth = curves
    n_show = min(n_show, len(learned))
    fig, axes = plt.subplots(2, n_show, figsize=(3.8 * n_show, 5.2), sharex=True,
                             gridspec_kw={"height_ratios": [3, 1.3]}, squeeze=False)
    for k in range(n_show):
        events = data["events"][k]
        ax, err = axes[0, k], axes[1, k]
        ax.plot(t_grid, learned[k], color="tab:blue", lw=2, label="learned $\\lambda(t)$")
        ax.plot(t_grid, truth[k], color="k", lw=1, ls="--", label="true $\\lambda(t)$")
        ax.plot(events, np.zeros_like(events), "o", color="tab:red", ms=4, clip_on=False,
                label="events")
        ax.axvline(data["t_end"], color="0.5", lw=0.8, ls=":")
        ax.set_ylim(bottom=0)
        ax.set_title(f"sequence {k + 1} ({len(events)} events)", fontsize=10)
        err.plot(t_grid, learned[k] - truth[k], color="tab:purple", lw=1.2)
        err.axhline(0, color="0.6", lw=0.8)
        err.axvline(data["t_end"], color="0.5", lw=0.8, ls=":")
        err.set_xlabel("t")
    axes[0, 0].set_ylabel("intensity")
    axes[1, 0].set_ylabel("learned - true")
    axes[0, 0].legend(fontsize=8, loc="upper right")
    fig.suptitle("Figure 8: latent ODE with a Poisson process likelihood (reproduction; "
                 "dotted: end of the observed window)")
    save_figure(fig, path)


def figure_training(path, history):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(history["iteration"], history["loss"])
    ax.set_xlabel("iteration")
    ax.set_ylabel("-ELBO per sequence")
    ax.set_title("Poisson latent ODE: training")
    save_figure(fig, path, dpi=110)
