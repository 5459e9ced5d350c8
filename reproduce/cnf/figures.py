"""The figures: Figure 4 (densities, samples, loss against K/M), Figure 6 (the CNF's densities and
samples along its time, the NF and the data), and the training curves."""
import numpy as np

from reproduce.common import pyplot, save_figure


def _density(ax, grid, log_q, title=None):
    n = len(grid)
    ax.imshow(np.exp(np.reshape(log_q, (n, n))), origin="lower", cmap="viridis",
              extent=(grid[0], grid[-1], grid[0], grid[-1]), interpolation="nearest")
    _frame(ax, grid, title)


def _scatter(ax, grid, points, title=None, color="C0"):
    points = np.asarray(points)
    ax.scatter(points[:, 0], points[:, 1], s=1.0, alpha=0.5, color=color, linewidths=0)
    ax.set_xlim(grid[0], grid[-1])
    ax.set_ylim(grid[0], grid[-1])
    ax.set_aspect("equal")
    _frame(ax, grid, title)


def _mark(ax, progress):
    """Write on a panel how far its model was trained, when a run was cut short."""
    if progress:
        ax.text(0.5, 0.04, progress, color="w", ha="center", va="bottom", fontsize=7,
                transform=ax.transAxes, bbox=dict(facecolor="k", alpha=0.5, linewidth=0))


def _frame(ax, grid, title):
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)


def _figure4_layout(panels, draw, title, path, results=None):
    names = list(panels)
    sizes = list(panels[names[0]]["nf"])
    extra = 1 if results is not None else 0
    plt = pyplot()
    fig, axes = plt.subplots(len(names), 1 + 2 * len(sizes) + extra,
                             figsize=(2.0 * (1 + 2 * len(sizes)) + 3.0 * extra,
                                      2.1 * len(names)), squeeze=False)
    for r, name in enumerate(names):
        p = panels[name]
        _density(axes[r, 0], p["grid"], p["target"], "Target" if r == 0 else None)
        axes[r, 0].set_ylabel(name)
        for c, size in enumerate(sizes):
            draw(axes[r, 1 + c], p, "nf", size, f"NF K={size}" if r == 0 else None)
            draw(axes[r, 1 + len(sizes) + c], p, "cnf", size,
                 f"CNF M={size}" if r == 0 else None)
            _mark(axes[r, 1 + c], p["nf"][size].get("progress"))
            _mark(axes[r, 1 + len(sizes) + c], p["cnf"][size].get("progress"))
        if results is not None:
            _loss_panel(axes[r, -1], results[name], first=(r == 0))
    fig.suptitle(title)
    save_figure(fig, path)


def _loss_panel(ax, row, first):
    sizes = list(row["nf"])
    for kind, label, color in (("nf", "NF", "C3"), ("cnf", "CNF", "C0")):
        kl = [row[kind][s]["kl"] for s in sizes]
        se = [row[kind][s]["loss_se"] for s in sizes]
        ax.errorbar(sizes, kl, yerr=se, marker="o", color=color, label=label, capsize=2)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(s) for s in sizes])
    ax.set_xlabel("K (NF) / M (CNF)")
    ax.set_ylabel("KL(q || p) (nats)")
    if first:
        ax.set_title("Loss", fontsize=9)
        ax.legend(fontsize=8)


def figure4(path, panels, results):
    """Rows: targets; columns: target density, NF densities, CNF densities, final KL."""
    _figure4_layout(panels, lambda ax, p, kind, size, title: _density(
        ax, p["grid"], p[kind][size]["log_q"], title),
        "Figure 4 (Chen et al. 2018): planar NF vs planar CNF, densities q and KL(q || p)",
        path, results)


def figure4_samples(path, panels):
    """Figure 4's layout with samples of each model instead of its density."""
    _figure4_layout(panels, lambda ax, p, kind, size, title: _scatter(
        ax, p["grid"], p[kind][size]["samples"], title, "C3" if kind == "nf" else "C0"),
        "Figure 4 (Chen et al. 2018): samples of the planar NF and CNF", path)


def figure6(path, panels, results):
    """Per data set: a density row and a samples row; columns: the CNF at 5%..100% of its
    time, the data (target) and the NF."""
    names = list(panels)
    fractions = panels[names[0]]["fractions"]
    cols = len(fractions) + 2
    plt = pyplot()
    fig, axes = plt.subplots(2 * len(names), cols, figsize=(1.9 * cols, 2.0 * 2 * len(names)),
                             squeeze=False)
    for d, name in enumerate(names):
        p, grid = panels[name], panels[name]["grid"]
        ll = results[name]["test_log_likelihood"]
        top, bottom = axes[2 * d], axes[2 * d + 1]
        for c, frac in enumerate(fractions):
            _density(top[c], grid, p["cnf_log_q"][c], f"CNF {int(round(100 * frac))}%")
            _scatter(bottom[c], grid, p["cnf_samples"][c])
        edges = np.linspace(grid[0], grid[-1], len(grid) + 1)
        hist, _, _ = np.histogram2d(p["data"][:, 1], p["data"][:, 0], bins=(edges, edges),
                                    density=True)
        top[-2].imshow(hist, origin="lower", cmap="viridis",
                       extent=(grid[0], grid[-1], grid[0], grid[-1]))
        _frame(top[-2], grid, "Target")
        _scatter(bottom[-2], grid, p["data"][:len(p["cnf_samples"][-1])], color="k")
        _density(top[-1], grid, p["nf_log_q"], "NF")
        _scatter(bottom[-1], grid, p["nf_samples"], color="C3")
        top[0].set_ylabel(f"{name.replace('_', ' ').title()}\nDensity")
        bottom[0].set_ylabel("Samples")
        top[-1].set_title(f"NF (test LL {ll['nf']['mean']:.2f})", fontsize=9)
        top[-3].set_title(f"CNF 100% (test LL {ll['cnf']['mean']:.2f})", fontsize=9)
        progress = p.get("progress", {})
        for c in range(len(fractions)):
            _mark(top[c], progress.get("cnf"))
        _mark(top[-1], progress.get("nf"))
    fig.suptitle("Figure 6 (Chen et al. 2018): CNF (M=64) and NF (K=64) trained by maximum "
                 "likelihood")
    save_figure(fig, path)


def training_curves(path, histories):
    """Training loss against iteration of every model (moving average over 1% of the run's
    points); keys are <figure>_<target>_<nf|cnf><size>, one panel per <figure>_<target>, each
    a history with "loss" and "iteration" (common._history)."""
    groups = list(dict.fromkeys(key.rsplit("_", 1)[0] for key in histories))
    plt = pyplot()
    fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3.0), squeeze=False)
    for ax, group in zip(axes[0], groups):
        keys = [k for k in histories if k.rsplit("_", 1)[0] == group]
        low, high = np.inf, -np.inf
        for kind, cmap in (("nf", plt.cm.Reds), ("cnf", plt.cm.Blues)):
            mine = sorted((k for k in keys if k.rsplit("_", 1)[1].startswith(kind)),
                          key=lambda k: int(k.rsplit("_", 1)[1][len(kind):]))
            for i, key in enumerate(mine):
                loss = np.asarray(histories[key]["loss"])
                if len(loss) == 0:
                    continue
                window = max(1, len(loss) // 100)
                smooth = np.convolve(loss, np.ones(window) / window, mode="valid")
                steps = np.asarray(histories[key]["iteration"])[window - 1:]
                ax.plot(steps, smooth, label=key.rsplit("_", 1)[1],
                        color=cmap(0.45 + 0.5 * (i + 1) / len(mine)))
                tail = smooth[len(smooth) // 10:]  # the axis ignores the start-up transient
                low, high = min(low, tail.min()), max(high, tail.max())
        if np.isfinite(low):
            pad = 0.1 * (high - low) + 1e-3
            ax.set_ylim(low - pad, high + pad)
        ax.set_xscale("log")
        ax.set_xlabel("iteration")
        ax.set_ylabel("training loss")
        ax.set_title(group.replace("_", " "), fontsize=9)
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not trained in this run", ha="center", va="center",
                    transform=ax.transAxes)
    fig.suptitle("Training curves (Figure 4: E_q[log q + U], NF annealed at first; "
                 "Figure 6: -log-likelihood)")
    save_figure(fig, path, dpi=100)
