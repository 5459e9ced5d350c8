"""Figure 3 (statistics of a trained ODE-Net), the memory figure and Table 1's text.

`figure3_sweep` measures, on a trained ODE-Net and a test batch, for each tolerance of a sweep:
the forward NFE and the numerical error of z(1) against a tight-tolerance solve (panel a, in
float64 TensorFlow so that the error is the solver's and not float32 rounding), the forward wall
time (panel b, the float32 model as trained) and the backward NFE of the loss's gradient (panel
c, beside the per-batch NFE of training). Panel d is the forward NFE over training.
"""
import time

import numpy as np
from autograd import grad

from odeint_autograd import SolverStats, odeint

from .models import LABELS, T_SPAN, cross_entropy, tf_blocks


def _solve(dynamics, h, params, tol, stats):
    return odeint(dynamics, h, np.array(T_SPAN), args=tuple(params), method="adams", rtol=tol,
                  atol=tol, stats=stats)[-1]


def figure3_sweep(params, x, y, tols, ref_tol, error_batch, jit=True):
    """Rows per tolerance: nfe_forward, relative_error (a; float64, the first `error_batch`
    images), forward_seconds (b; float32, all of x), nfe_forward_grad, nfe_backward (c)."""
    f64, f32 = tf_blocks("float64", False), tf_blocks("float32", jit)
    dyn = params["dynamics"]
    h64 = f64["down"](x[:error_batch], *params["down"])
    ref_stats = SolverStats()
    started = time.perf_counter()
    ref = _solve(f64["dynamics"], h64, dyn, ref_tol, ref_stats)
    reference = {"tol": ref_tol, "nfe_forward": ref_stats.forward.nfe,
                 "seconds": time.perf_counter() - started, "batch": int(error_batch)}
    h32 = np.asarray(f32["down"](x, *params["down"]))
    _solve(f32["dynamics"], h32, dyn, max(tols), SolverStats())  # traces before any timing
    rows = []
    for tol in tols:
        s64 = SolverStats()
        z = _solve(f64["dynamics"], h64, dyn, tol, s64)
        error = float(np.sqrt(np.mean((z - ref) ** 2) / np.mean(ref ** 2)))
        s32 = SolverStats()
        started = time.perf_counter()
        _solve(f32["dynamics"], h32, dyn, tol, s32)
        seconds = time.perf_counter() - started
        sg = SolverStats()

        def loss(dp):
            z1 = _solve(f32["dynamics"], h32, dp, tol, sg)
            return cross_entropy(f32["head"](z1, *params["head"]), y)

        grad(loss)(list(dyn))
        rows.append({"tol": tol, "nfe_forward_f64": s64.forward.nfe,
                     "relative_error": error, "nfe_forward": s32.forward.nfe,
                     "forward_seconds": seconds, "nfe_forward_grad": sg.forward.nfe,
                     "nfe_backward": sg.backward.nfe})
    return {"reference": reference, "rows": rows}


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_figure3(path, sweep, batches, mode, batches_per_epoch):
    """The paper's four panels: (a) NFE vs numerical error, (b) NFE vs forward time, (c) NFE
    backward vs forward, (d) forward NFE over training."""
    plt = _plt()
    fig, ax = plt.subplots(1, 4, figsize=(17, 3.9))
    rows = sweep["rows"]
    nfe = [r["nfe_forward_f64"] for r in rows]
    ax[0].semilogy(nfe, [r["relative_error"] for r in rows], "o-")
    for r in rows:
        ax[0].annotate(f"{r['tol']:g}", (r["nfe_forward_f64"], r["relative_error"]),
                       textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax[0].set(xlabel="NFE forward", ylabel="numerical error (relative RMS of z(1))",
              title=f"(a) vs solve at tol {sweep['reference']['tol']:g}")
    ax[1].plot([r["nfe_forward"] for r in rows], [r["forward_seconds"] for r in rows], "o-")
    ax[1].set(xlabel="NFE forward", ylabel="forward time (s)", title="(b) wall time")
    nfe_f = np.array([b["nfe_forward"] for b in batches], float)
    nfe_b = np.array([b["nfe_backward"] for b in batches], float)
    ax[2].scatter(nfe_f, nfe_b, s=6, alpha=0.3, label="training batches (tol 1e-3)")
    ax[2].scatter([r["nfe_forward_grad"] for r in rows], [r["nfe_backward"] for r in rows],
                  marker="s", color="C3", label="tolerance sweep")
    top = max(np.max(nfe_f, initial=1), max(r["nfe_forward_grad"] for r in rows))
    ax[2].plot([0, top], [0, top], "k:", lw=1, label="backward = forward")
    ax[2].plot([0, top], [0, top / 2], "k--", lw=1, label="backward = forward / 2")
    ax[2].set(xlabel="NFE forward", ylabel="NFE backward", title="(c) backward vs forward")
    ax[2].legend(fontsize=7)
    epochs = np.array([b["epoch"] + (b["batch"] + 1) / batches_per_epoch for b in batches])
    ax[3].plot(epochs, nfe_f, ".", ms=3, alpha=0.4, label="per batch")
    ends = sorted({b["epoch"] for b in batches})
    means = [np.mean(nfe_f[[b["epoch"] == e for b in batches]]) for e in ends]
    ax[3].plot(np.array(ends) + 1, means, "o-", color="C1", label="epoch mean")
    ax[3].set(xlabel="training epoch", ylabel="NFE forward", title="(d) NFE over training")
    ax[3].legend(fontsize=7)
    fig.suptitle(f"Figure 3 (Chen et al. 2018): statistics of a trained ODE-Net [{mode}]")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_memory(path, rows, mode, batch):
    """Peak memory of one training step: ResNet against its depth L; RK-Net (RK4 with n steps,
    and the adaptive dopri5 RK-Net) and ODE-Net (adjoint, t in [0, T]) against the forward NFE."""
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    res = [r for r in rows if r["model"] == "resnet"]
    left.plot([r["n_blocks"] for r in res], [r["peak_mb"] for r in res], "o-", color="C0",
              label="ResNet (backprop through L blocks)")
    left.set(xlabel="residual blocks L", ylabel="peak memory of a training step (MB)",
             title="depth: O(L)")
    series = [("RK-Net, RK4 with n steps (direct backprop)",
               lambda r: r["model"] == "rknet" and r.get("method") == "rk4", "s-", "C2"),
              ("RK-Net, dopri5 tol 1e-3 (as trained)",
               lambda r: r["model"] == "rknet" and r.get("method") is None, "D", "C2"),
              ("ODE-Net, adjoint, t in [0, T]", lambda r: r["model"] == "odenet", "o-", "C3")]
    for label, pick, style, color in series:
        sel = sorted((r for r in rows if pick(r)), key=lambda r: r["nfe_forward"])
        if sel:
            right.plot([r["nfe_forward"] for r in sel], [r["peak_mb"] for r in sel], style,
                       color=color, label=label)
    right.plot([r["n_blocks"] for r in res], [r["peak_mb"] for r in res], "o:", color="C0",
               alpha=0.5, label="ResNet (NFE = L)")
    right.set(xlabel="function evaluations in the forward pass (NFE, or L)",
              ylabel="peak memory of a training step (MB)", title="NFE: O(L~) vs O(1)")
    for ax in (left, right):
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.suptitle(f"Table 1's memory column, measured (batch {batch}, peak resident memory) "
                 f"[{mode}]")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table1_markdown(models, mode):
    """Table 1 as measured (the report puts the published numbers beside it)."""
    lines = [f"# Table 1 (Chen et al. 2018), measured [{mode}]", "",
             "| model | test error | params | peak memory of a step | s / batch | "
             "s / full epoch | NFE fwd | NFE bwd | epochs run |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def fmt(v, spec):
        return "-" if v is None else format(v, spec)

    for name, m in models.items():
        lines.append(
            f"| {LABELS[name]} | {fmt(m.get('test_error_pct'), '.2f')}% | "
            f"{m['n_params'] / 1e6:.3f} M | {fmt(m.get('peak_memory_mb'), '.0f')} MB | "
            f"{fmt(m.get('seconds_per_batch'), '.3f')} | "
            f"{_epoch_seconds(m)} | "
            f"{fmt(m.get('mean_nfe_forward'), '.1f')} | {fmt(m.get('mean_nfe_backward'), '.1f')}"
            f" | {m['epochs_run']} of {m['epochs_planned']} on {m['n_train']} images |")
    batch = next((m["peak_memory_batch"] for m in models.values()
                  if m.get("peak_memory_batch")), "-")
    lines += ["", "s / full epoch: measured where whole epochs on all 60,000 images ran, else "
              "~ projected as s / batch x the batches of a full epoch (468 of 128). Peak "
              f"memory: one training step at batch {batch}, resident memory (see the choices "
              "in results.json)."]
    return "\n".join(lines) + "\n"


def _epoch_seconds(m):
    if m.get("measured_epoch_seconds") is not None:
        return f"{m['measured_epoch_seconds']:.0f}"
    if m.get("projected_epoch_seconds") is not None:
        return f"~{m['projected_epoch_seconds']:.0f}"
    return "-"
