"""The MNIST section of the report: Table 1 beside the published numbers, the memory slopes and
Figure 3."""
from reproduce import published
from reproduce.benchmarks import benchmark, nfe_ratio_table
from reproduce.markdown import (best, choices_block, duration_row, figure_links, fmt, image,
                                minutes, not_run, run_line, table)

from .figures import table1
from .train import PAPER_EPOCHS as FULL_EPOCHS
from .models import LABELS, NAMES

TITLE = "Table 1 and Figure 3: MNIST (Section 3)"


def section(runs):
    record = best(runs)
    if record is None:
        return not_run(TITLE)
    res = record["results"]
    slopes = (res.get("memory") or {}).get("slopes_mb", {})
    fig3 = res.get("figure3") or {}
    bullets = [b for b in [convergence(res["table1"])] if b]
    if slopes:
        bullets.append(f"- Memory (Table 1's O() column, measured): ResNet "
                       f"{slopes.get('resnet_per_block', 0):+.2f} MB per residual block (O(L)); "
                       f"RK-Net (RK4, direct backprop) {slopes.get('rk4_per_nfe', 0):+.2f} MB per "
                       f"function evaluation (O(L~)); ODE-Net (adjoint) "
                       f"{slopes.get('odenet_per_nfe', 0):+.4f} MB per function evaluation "
                       f"(O(1)).")
    if fig3:
        ratio = fig3.get("backward_over_forward_training")
        per_epoch = [f"{e['mean_nfe_forward']:.1f}" for e in fig3.get("training_nfe_per_epoch",
                                                                          [])]
        per_epoch_ratio = [f"{e['mean_nfe_backward'] / e['mean_nfe_forward']:.2f}"
                           for e in fig3.get("training_nfe_per_epoch", [])]
        bullets.append(f"- Figure 3(c): backward NFE / forward NFE during training = "
                       f"{fmt(ratio)} (published: {published.FIGURE3['c']}); per epoch "
                       f"{', '.join(per_epoch_ratio)}." + nfe_ratio_text())
        bullets.append(f"- Figure 3(d): mean forward NFE per epoch: {', '.join(per_epoch)} "
                       f"(published: {published.FIGURE3['d']}).")
        rows = [[r["tol"], r["nfe_forward"], r["relative_error"], r["forward_seconds"],
                 r.get("nfe_backward")] for r in fig3.get("rows", [])]
        bullets.append("- Figure 3(a, b), tolerance sweep of the trained ODE-Net (error against "
                       f"a solve at tol {fig3.get('reference', {}).get('tol')}):\n\n"
                       + table(["tol", "NFE fwd", "relative error", "forward s", "NFE bwd"],
                               rows))
    return "\n\n".join([
        f"## {TITLE}",
        run_line(record),
        "Table 1, measured beside published.",
        table1(res["table1"], published.TABLE1),
        "Commands of the training runs behind the table:\n\n" + "\n".join(
            f"- {LABELS[name]}: `{res['table1'][name]['command']}` "
            f"(trained {_trained(res['table1'][name])})"
            for name in NAMES if res["table1"].get(name)),
        "\n".join(bullets),
        figure_links(record, ["figure3.png", "memory.png"]),
        choices_block(record)])


def _trained(m, day=False):
    """When a model's training finished; weights saved before that was kept give only a bound,
    the date of the file that scored them."""
    cut = 10 if day else None
    return m["trained"][:cut] if m.get("trained") else f"before {m['date'][:cut]}"


def convergence(table):
    """A bullet to judge whether each run reached its plateau: the test error per epoch of the
    runs planned shorter than the paper's (budget, quick), and every model's range over the last
    quarter of its epochs (at least three); None without a training history."""
    parts = []
    for name in NAMES:
        row = table.get(name) or {}
        errors = [h["test_error_pct"] for h in row.get("history") or []]
        if not errors:
            continue
        last = errors[-max(3, len(errors) // 4):]
        curve = (f": {', '.join(f'{e:.2f}' for e in errors)}"
                 if row.get("epochs_planned", len(errors)) < FULL_EPOCHS else "")
        parts.append(f"{LABELS[name]}{curve} (last {len(last)} epoch{'s' * (len(last) > 1)} "
                     f"{min(last):.2f}-{max(last):.2f})")
    return ("- Test error % per epoch, to judge the plateau: " + "; ".join(parts) + "."
            if parts else None)


def nfe_ratio_text():
    """The ratio per solver setting on the trained ODE-Net (benchmarks/nfe_ratio.py), if run."""
    data = benchmark("nfe_ratio")
    if data is None:
        return ""
    rows = data["rows"]
    closest = min(rows, key=lambda r: abs(r["backward_over_forward"]
                                         - published.FIGURE3_BACKWARD_OVER_FORWARD))
    describe = lambda r: (f"{r['method']} forward, {r['adjoint_method']} adjoint at tol "  # noqa
                          f"{r['adjoint_tol']:g}, {'seminorm' if r['seminorm'] else 'full norm'}")
    return (f" Per solver setting, on {data['model']} ({data['batches']} test batches; "
            f"`{data['command']}`):\n\n"
            + nfe_ratio_table(data)
            + f"\n\n  Training setting ({describe(rows[0])}): "
            f"{rows[0]['backward_over_forward']:.2f}; closest to the published "
            f"~{published.FIGURE3_BACKWARD_OVER_FORWARD}: "
            f"{describe(closest)}, {closest['backward_over_forward']:.2f}.")


def summary(runs):
    record = best(runs)
    if record is None:
        return []
    return [f"**Table 1, MNIST** ({record['mode']}: `{record['command']}`)",
            table1(record["results"]["table1"], published.TABLE1),
            image(record, "figure3.png", "Figure 3")]


def hours(seconds):
    return f"{seconds / 3600:.1f} h"


def durations(runs):
    """A full run gathers models trained by several commands: one row per model, its time per
    epoch of 60,000 images."""
    rows = []
    for mode, record in sorted(runs.items()):
        if mode != "full":
            rows.append(duration_row("mnist", record))
            continue
        for name in NAMES:
            m = record["results"]["table1"].get(name)
            if m and m.get("measured_epoch_seconds"):
                epoch = m["measured_epoch_seconds"]
                rows.append(["mnist", "full", f"{LABELS[name]}, {m['epochs_run']} epochs of "
                             f"60,000 images: `{m['command']}`", _trained(m, day=True),
                             f"{minutes(epoch)} per epoch, {hours(m['train_seconds'])} in all; "
                             f"the paper's {FULL_EPOCHS} epochs: {hours(FULL_EPOCHS * epoch)}"])
    return rows
