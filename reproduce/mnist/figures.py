"""Figure 3 (statistics of a trained ODE-Net), the memory figure and Table 1.

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

from reproduce.common import pyplot, save_figure
from reproduce.markdown import fmt, table

from .models import LABELS, NAMES, T_SPAN, cross_entropy, tf_blocks
from .train import PAPER_EPOCHS


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


def plot_figure3(path, sweep, batches, mode, batches_per_epoch):
    """The paper's four panels: (a) NFE vs numerical error, (b) NFE vs forward time, (c) NFE
    backward vs forward, (d) forward NFE over training."""
    plt = pyplot()
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
    save_figure(fig, path)


def plot_memory(path, rows, mode, batch):
    """Peak memory of one training step: ResNet against its depth L; RK-Net (RK4 with n steps,
    and the adaptive dopri5 RK-Net) and ODE-Net (adjoint, t in [0, T]) against the forward NFE."""
    plt = pyplot()
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
    save_figure(fig, path)


def epochs_text(m):
    """'160 of 160', 'budget: 10 of 160 epochs' (the paper's schedule compressed), or a run
    stopped early: how much of which protocol a row's model was trained for."""
    done, planned = m["epochs_run"], m["epochs_planned"]
    images = f" on {m['n_train']:,} images"
    if planned < PAPER_EPOCHS and m["n_train"] == 60000:
        text = f"budget: {planned} of {PAPER_EPOCHS} epochs"
        return (text if done == planned else f"{done} epochs of the {text}") + images
    return f"{done} of {planned}" + images


def table1(models, published=None):
    """Table 1 in markdown: each model's train summary (name -> row of results["table1"]), with
    the published numbers (name -> row of published.TABLE1) beside them when given."""
    header = ["model", "test error", "params", "peak memory of a training step", "min / epoch",
              "NFE fwd / bwd", "epochs run"]
    if published:
        for column in (4, 3, 2):  # after peak memory, params and test error
            header.insert(column, "published")
    rows = []
    for name in NAMES:
        m, pub = models.get(name), (published or {}).get(name)
        if m is None and pub is None:
            continue
        if m is None:
            cells = ["not run", "-", "-", "-", "-", "-"]
        else:
            epoch_s = m.get("measured_epoch_seconds") or m.get("projected_epoch_seconds")
            cells = [f"{m['test_error_pct']:.2f}%", f"{m['n_params'] / 1e6:.3f} M",
                     "-" if m.get("peak_memory_mb") is None else f"{m['peak_memory_mb']:.0f} MB",
                     "-" if not epoch_s else fmt(epoch_s / 60, 1) + (
                         "" if m.get("measured_epoch_seconds") else " (proj.)"),
                     "-" if m.get("mean_nfe_forward") is None else
                     f"{m['mean_nfe_forward']:.1f} / {m['mean_nfe_backward']:.1f}",
                     epochs_text(m)]
        if pub is not None:
            cells.insert(3, pub["memory"])
            cells.insert(2, f"{pub['params_m']:.2f} M")
            cells.insert(1, f"{pub['test_error_pct']:.2f}%")
        rows.append([LABELS[name]] + cells)
    return table(header, rows)
