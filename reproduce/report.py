"""python -m reproduce report: figures/RESULTS.md, the measured numbers beside the published ones.

Reads every experiment's results.json (the full run where there is one, else the quick run) and
the benchmark files in figures/benchmarks/, and reproduce/published.py for the paper's numbers
(the only reader of that module). It also rewrites the README's generated blocks (between
`<!-- generated:NAME -->` and `<!-- /generated:NAME -->`), so that every number in the README
comes from a results file, with the command that made it.
"""
import datetime
import json
import os
import re

from reproduce import published
from reproduce.common import ROOT, progress_label

FIGURES = os.path.join(ROOT, "figures")


MODES = ["full", "quick"]  # the report's preference; --mode M reports M's runs only


def load(name):
    """{mode: record} of an experiment's results files (full in figures/NAME, others below)."""
    runs = {}
    for mode in MODES:
        folder = name if mode == "full" else f"{name}/{mode}"
        path = os.path.join(FIGURES, folder, "results.json")
        if os.path.exists(path):
            with open(path) as f:
                record = json.load(f)
            record["folder"] = folder
            runs[record.get("mode", mode)] = record
    return runs


def best(runs):
    """The full run's record if there is one, else the quick run's (else smoke's), else None."""
    return next((runs[m] for m in MODES if m in runs), None)


def fmt(x, digits=3):
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e6 and x != 0:
        x = int(x)
    if isinstance(x, int):
        return f"{x:,}"
    if abs(x) >= 1000 or (x != 0 and abs(x) < 10 ** -digits):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}f}"


def minutes(seconds):
    return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def run_line(record):
    machine = record.get("machine", {})
    where = f"{machine.get('cpus', '?')} CPUs"
    if machine.get("gpus"):
        where += ", GPU " + ", ".join(machine["gpus"])
    return (f"**{record['mode']}** run: `{record['command']}` (seed {record.get('seed')}), "
            f"{record.get('date', '?')}, {duration_text(record)} on {where} "
            f"({machine.get('platform', '?')}, numpy {machine.get('numpy', '?')}, "
            f"scipy {machine.get('scipy', '?')}, autograd {machine.get('autograd', '?')}"
            + (f", tensorflow {machine['tensorflow']}" if machine.get("tensorflow") else "")
            + ")" + (f". Note: {record['results']['note']}"
                     if isinstance(record.get("results"), dict)
                     and isinstance(record["results"].get("note"), str) else ""))


def choices_block(record):
    items = record.get("choices", {})
    if not items:
        return ""
    return "Reproduction choices (the paper is silent on these):\n\n" + "\n".join(
        f"- **{k}**: {v}" for k, v in items.items())


def image(record, name, title):
    """A README image link (paths from the project root), or nothing if the file is missing."""
    path = os.path.join(FIGURES, record["folder"], name)
    return f"![{title}](figures/{record['folder']}/{name})" if os.path.exists(path) else ""


def figure_links(record, names):
    return "\n".join(f"![{n}]({record['folder']}/{n})" for n in names
                     if os.path.exists(os.path.join(FIGURES, record["folder"], n)))


# ---------------------------------------------------------------- experiments

MNIST_MODELS = (("mlp", "1-layer MLP"), ("resnet", "ResNet"), ("rknet", "RK-Net"),
                ("odenet", "ODE-Net"))


def mnist_tables(record):
    res = record["results"]
    rows = []
    for key, label in MNIST_MODELS:
        m, pub = res["table1"].get(key), published.TABLE1[key]
        if m is None:
            rows.append([label, "not run", f"{pub['test_error_pct']:.2f}%", "-",
                         f"{pub['params_m']:.2f} M", "-", pub["memory"], "-", "-", "-"])
            continue
        epoch_s = m.get("measured_epoch_seconds") or m.get("projected_epoch_seconds")
        epoch = (fmt(epoch_s / 60, 1) + ("" if m.get("measured_epoch_seconds") else " (proj.)")
                 if epoch_s else "-")
        nfe = ("-" if m.get("mean_nfe_forward") is None else
               f"{m['mean_nfe_forward']:.1f} / {m['mean_nfe_backward']:.1f}")
        rows.append([label, f"{m['test_error_pct']:.2f}%", f"{pub['test_error_pct']:.2f}%",
                     f"{m['n_params'] / 1e6:.3f} M", f"{pub['params_m']:.2f} M",
                     "-" if m.get("peak_memory_mb") is None else f"{m['peak_memory_mb']:.0f} MB",
                     pub["memory"], epoch, nfe,
                     f"{m['epochs_run']} on {m['n_train']:,} images"])
    header = ["model", "test error", "published", "params", "published", "peak memory of a "
              "training step", "published", "min / epoch", "NFE fwd / bwd", "epochs run"]
    return table(header, rows)


def mnist_section(runs):
    record = best(runs)
    if record is None:
        return "## Table 1 and Figure 3: MNIST\n\nNot run yet."
    res = record["results"]
    slopes = (res.get("memory") or {}).get("slopes_mb", {})
    fig3 = res.get("figure3") or {}
    bullets = []
    if slopes:
        bullets.append(f"- Memory (Table 1's O() column, measured): ResNet "
                       f"+{slopes.get('resnet_per_block', 0):.2f} MB per residual block (O(L)); "
                       f"RK-Net (RK4, direct backprop) +{slopes.get('rk4_per_nfe', 0):.2f} MB per "
                       f"function evaluation (O(L~)); ODE-Net (adjoint) "
                       f"+{slopes.get('odenet_per_nfe', 0):.4f} MB per function evaluation "
                       f"(O(1)).")
    if fig3:
        ratio = fig3.get("backward_over_forward_training")
        per_epoch = [f"{e['mean_nfe_forward']:.1f}" for e in fig3.get("training_nfe_per_epoch",
                                                                          [])]
        bullets.append(f"- Figure 3(c): backward NFE / forward NFE during training = "
                       f"{fmt(ratio)} (published: {published.FIGURE3['c']}).")
        bullets.append(f"- Figure 3(d): mean forward NFE per epoch: {', '.join(per_epoch)} "
                       f"(published: {published.FIGURE3['d']}).")
        rows = [[r["tol"], r["nfe_forward"], r["relative_error"], r["forward_seconds"],
                 r.get("nfe_backward")] for r in fig3.get("rows", [])]
        bullets.append("- Figure 3(a, b), tolerance sweep of the trained ODE-Net (error against "
                       f"a solve at tol {fig3.get('reference', {}).get('tol')}):\n\n"
                       + table(["tol", "NFE fwd", "relative error", "forward s", "NFE bwd"],
                               rows))
    return "\n\n".join([
        "## Table 1 and Figure 3: MNIST (Section 3)",
        run_line(record),
        "Table 1, measured beside published.",
        mnist_tables(record),
        "Commands of the training runs behind the table:\n\n" + "\n".join(
            f"- {label}: `{res['table1'][key]['command']}` ({res['table1'][key]['date']})"
            for key, label in MNIST_MODELS if res["table1"].get(key)),
        "\n".join(bullets),
        figure_links(record, ["figure3.png", "memory.png"]),
        choices_block(record)])


def cnf_tables(record):
    """Figure 4 and 6 tables; a model trained for fewer than its planned iterations (a full run
    cut short) has its cell marked with the iterations it ran."""
    res = record["results"]
    iterations = res.get("iterations", {})

    def cell(value, key):
        it = iterations.get(key)
        label = it and progress_label(it["run"], it["planned"])
        return f"{fmt(value)} ({label})" if label else value

    rows = []
    for target, entry in res["figure4"].items():
        for kind, label in (("nf", "planar NF (K layers)"), ("cnf", "planar CNF (M units)")):
            cells = entry[kind]
            rows.append([target, label] + [cell(cells[k]["kl"], f"fig4_{target}_{kind}{k}")
                                           for k in sorted(cells, key=int)])
    sizes = sorted(next(iter(res["figure4"].values()))["nf"], key=int)
    fig4 = table(["target", "model"] + [f"K = M = {k}" for k in sizes], rows)
    rows = []
    for dataset, entry in res["figure6"].items():
        ll = entry["test_log_likelihood"]
        rec = entry.get("reconstruction", {}).get("training_tolerance", {})
        key = entry["models"]
        rows.append([dataset.replace("_", " "), cell(ll["cnf"]["mean"], key["cnf"]),
                     cell(ll["nf"]["mean"], key["nf"]),
                     rec.get("max_abs_error"), rec.get("tolerance")])
    fig6 = table(["dataset", "CNF test log-lik.", "NF test log-lik.",
                  "CNF forward+backward max error", "at tolerance"], rows)
    return fig4, fig6


def cnf_records(runs):
    """The CNF runs to show: the best one, and the quick one beside a full run cut short (whose
    models did not all train)."""
    record = best(runs)
    if record is None:
        return []
    if record["mode"] == "full" and record["results"].get("note") and "quick" in runs:
        return [record, runs["quick"]]
    return [record]


def cnf_section(runs):
    records = cnf_records(runs)
    if not records:
        return "## Figures 4 and 6: continuous normalizing flows\n\nNot run yet."
    section = _cnf_record_section(records[0])
    if len(records) > 1:
        section += ("\n\nThe full run above was cut short; below, the quick run, whose models "
                    "all finished their (shortened) training.\n\n"
                    + _cnf_record_section(records[1], heading=False))
    return section


def _cnf_record_section(record, heading=True):
    fig4, fig6 = cnf_tables(record)
    title = ("## Figures 4 and 6: continuous normalizing flows (Section 4.1)" if heading
             else "### The quick run")
    return "\n\n".join([
        title,
        run_line(record),
        "Figure 4, density matching: KL(q || p) in nats after training (lower is better; "
        "estimated on fresh samples, log Z by quadrature).",
        fig4,
        f"Published (Figure 4, no numbers given): {published.FIGURE4}.",
        "Figure 6, maximum likelihood: test log-likelihood per point (higher is better), and "
        "the Section 6 check: base samples run forward then backward through the trained CNF.",
        fig6,
        f"Published: {published.FIGURE6}. Section 6: {published.SECTION6}.",
        figure_links(record, ["figure4.png", "figure4_samples.png", "figure6.png",
                              "training_curves.png"]),
        choices_block(record)])


def spirals_tables(record):
    res = record["results"]["table2_rmse"]
    ns = sorted(next(iter(res.values())), key=int)

    def cell(entry):
        seeds = len(entry.get("rmse_clean_seeds", [0]))
        clean = fmt(entry["rmse_clean"])
        if seeds > 1:
            clean += f" ± {fmt(entry['rmse_clean_sd'])}"
        return f"{clean} ({fmt(entry['rmse_noisy'])})"

    rows = [[model] + [cell(by_n[n]) for n in ns] for model, by_n in res.items()]
    for model, key in (("RNN (published; compare RNN + dt)", "rnn"),
                       ("Latent ODE (published)", "latent_ode")):
        rows.append([model] + [f"{published.TABLE2[key][int(n)]:.4f}" for n in ns])
    return table(["model"] + [f"{n}/100 observations" for n in ns], rows)


def spirals_section(runs):
    record = best(runs)
    if record is None:
        return "## Table 2: latent ODE on spirals\n\nNot run yet."
    return "\n\n".join([
        "## Table 2, Figures 9 and 10: latent ODE on irregularly sampled spirals (Section 5)",
        run_line(record),
        "Predictive RMSE at the 100 extrapolation times of the test set against the noise-free "
        "points: mean ± sample sd over the training seeds, and in brackets against the noisy "
        "points. The published numbers can only be noise-free ones: with noise std 0.3 no "
        "model scores below about 0.3 against noisy points. The paper's single RNN row is "
        "compared with the RNN + dt, the RNN that can place its predictions at given times.",
        spirals_tables(record),
        figure_links(record, ["fig9.png", "fig10.png", "training.png"]),
        solver_speed_block(record["results"].get("solver_speed_latent_ode_n30"),
                           "the trained n = 30 latent ODE"),
        choices_block(record)])


def poisson_section(runs):
    record = best(runs)
    if record is None:
        return "## Figure 8: Poisson process\n\nNot run yet."
    res = record["results"]
    windows = [("in_sample", "training events (in sample)"),
               ("held_out", "fresh events, observed window (held out)"),
               ("held_out_extrapolated", "fresh events, extrapolated window (held out)")]
    ll = [[label] + [res.get(f"log_likelihood_{w}_{k}") for k in ("learned", "true", "constant")]
          for w, label in windows if f"log_likelihood_{w}_learned" in res]
    errors = [["relative L2 error of the learned intensity (observed window)",
               res["intensity_relative_l2_error"]],
              ["relative L2 error, extrapolated beyond the window",
               res["extrapolated_intensity_relative_l2_error"]]]
    return "\n\n".join([
        "## Figure 8: latent ODE Poisson process likelihood (Section 5)",
        run_line(record),
        table(["measured", "value"], errors),
        "Log-likelihood per sequence under the learned intensity, the true one and a constant "
        "rate. In sample the per-sequence z0 were fitted to these very events, so the learned "
        "intensity can beat the true one there; the held-out rows score fresh sequences drawn "
        f"from the same intensities ({res.get('fresh_sequences_per_intensity', '-')} per "
        "intensity).",
        table(["events", "learned", "true", "constant rate"], ll),
        f"Published (Figure 8, no numbers given): {published.FIGURE8}.",
        figure_links(record, ["fig8.png", "training.png"]),
        solver_speed_block(res.get("solver_speed"), "the trained model"),
        choices_block(record)])


def solver_speed_block(rows, model):
    """The latent experiments' solver measurements: one training gradient per solver setting."""
    if not rows:
        return ""
    return "\n\n".join([
        f"One training gradient of {model} per solver setting (seconds on the run's machine, "
        "NFE of the forward and the backward solves):",
        table(["method", "adjoint solved by", "tol", "seminorm", "seconds", "NFE fwd", "NFE bwd"],
              [[r["method"], r.get("adjoint_method", r["method"]), f"{r['tol']:.1e}",
                "yes" if r["seminorm"] else "no", r["seconds"], r["nfe_forward"],
                r["nfe_backward"]] for r in rows])])


# ---------------------------------------------------------------- benchmarks

def benchmark(name):
    path = os.path.join(FIGURES, "benchmarks", f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def spiral_demo_block():
    data = benchmark("spiral_demo")
    if data is None:
        return "Spiral demo benchmark: not run yet (`python benchmarks/spiral_demo.py`)."
    rows = [[r["solver"], f"{r['tol']:.0e}", 1e3 * r["median_s"], r["nfe_forward"],
             r["nfe_backward"], f"{r['grad_rel_error']:.1e}", f"{r['vs_autograd']:.2f}",
             f"{r['vs_torchdiffeq']:.2f}" if "vs_torchdiffeq" in r else "-"]
            for r in data["rows"]]
    return "\n\n".join([
        f"`{data['command']}` ({data['date']}, {data['repeats']} interleaved repeats, median): "
        "one forward + gradient of the spiral demo (MLP 2-50-2 on y**3, 20 segments of 10 "
        "steps); gradient error against a tight-tolerance reference.",
        table(["solver", "tol", "median ms", "NFE fwd", "NFE bwd", "grad rel. error",
               "time / autograd", "time / torchdiffeq"], rows),
        spiral_targets(data),
        f"One evaluation of the MLP dynamics in the backward solve (autograd tracing them and "
        f"running their VJP, as odeint_autograd does): "
        f"{1e6 * data['evaluation']['autograd_value_and_vjp_s']:.0f} us; the dynamics alone in "
        f"plain numpy: {1e6 * data['evaluation']['numpy_forward_s']:.0f} us."])


def spiral_targets(data):
    """Which of this project's rows meet the benchmark's targets (as the benchmark recorded
    them), per tolerance."""
    goal, rows, lines = data["targets"], data["rows"], []
    for tol in sorted({r["tol"] for r in rows}, reverse=True):
        ours = [r for r in rows if r["tol"] == tol and r["solver"].startswith("odeint_autograd")]
        met = [r["solver"] for r in ours
               if r["vs_autograd"] <= goal["vs_autograd_max"]
               and r.get("vs_torchdiffeq", 0.0) <= goal["vs_torchdiffeq_max"]
               and r["grad_rel_error"] <= goal["grad_rel_error_max"]]
        lines.append(f"at tol {tol:.0e}: " + (", ".join(met) if met else "none of the rows"))
    return (f"Targets: at most {goal['vs_autograd_max']}x the time of autograd's odeint and "
            f"{goal['vs_torchdiffeq_max']}x torchdiffeq's adjoint, with a gradient error of at "
            f"most {goal['grad_rel_error_max']:g}. Met " + "; ".join(lines) + ".")


def memory_block():
    data = benchmark("memory_scaling")
    if data is None:
        return "Memory benchmark: not run yet (`python benchmarks/memory_scaling.py`)."
    rows = [[r["method"], r["T"], r["steps"], r["nfe"], r["peak_mb"]] for r in data["rows"]]
    return "\n\n".join([
        f"`{data['command']}` ({data['date']}): peak numpy memory (tracemalloc) of one loss + "
        "gradient, batch 128 x 64, MLP dynamics, as the number of steps grows.",
        table(["method", "T", "steps", "NFE", "peak MB"], rows)])


def tf_overhead_block():
    data = benchmark("tf_overhead")
    if data is None:
        return "TensorFlow overhead benchmark: not run yet (`python benchmarks/tf_overhead.py`)."
    xla = benchmark("tf_overhead_xla")
    parts = benchmark("tf_overhead_value_and_vjp")
    runs = ([("", data)] + ([(" (XLA)", xla)] if xla else [])
            + ([(" (value_and_vjp)", parts)] if parts else []))
    rows = [[phase + label] + [run[phase][k] for k in ("wall_s", "tf_share", "scipy_share",
                                                        "glue_share", "nfe", "tf_ms_per_call",
                                                        "evaluation_ms", "scipy_ms_per_step")]
            for label, run in runs for phase in ("forward", "backward")]
    return "\n\n".join([
        f"`{data.get('command')}` ({data.get('date')}): the MNIST ODE block (batch 128, "
        "6x6x64) with Adams at tol 1e-3, split into time inside TensorFlow, scipy's own solver "
        "time, and the project's glue."
        + (f" The (XLA) rows: `{xla.get('command')}` ({xla.get('date')}), the same with "
           "`tf_primitive(..., jit_compile=True)`." if xla else "")
        + (f" The (value_and_vjp) rows: `{parts.get('command')}` ({parts.get('date')}), the "
           "backward solve given only `value_and_vjp`, so that odeint negates and concatenates "
           "the parts in numpy instead of TensorFlow doing it in `augmented_dynamics`."
           if parts else ""),
        table(["phase", "wall s", "TF share", "scipy share", "glue share", "NFE",
               "TF ms per call", "ms per evaluation", "scipy ms/step"], rows),
        "scipy alone, the same solver on states of the forward's and the backward's size with "
        "dynamics that cost nothing (dy/dt = -y):",
        table(["state", "numbers", "scipy ms/step", "ns per number per step"],
              [[name.replace("_", " "), r["size"], r["scipy_ms_per_step"],
                1e6 * r["scipy_ms_per_step"] / r["size"]]
               for name, r in data["scipy_alone"].items()]),
        f"One backward augmented evaluation takes {data['backward_evaluation_over_fused_call']:.2f}"
        f"x one fused TensorFlow value+VJP call timed on its own, back to back "
        f"({data['fused_value_vjp_call_ms']:.1f} ms; the target's measure), "
        f"{data['backward_evaluation_over_augmented_call']:.2f}x the call it makes, "
        "`augmented_dynamics` (the same plus the negations and the concatenation into one "
        f"array, inside TensorFlow), timed the same way ({data['augmented_dynamics_call_ms']:.1f}"
        f" ms), and {data['backward_evaluation_over_its_tf_call']:.2f}x that call as timed inside "
        f"the solve ({data['backward']['tf_ms_per_call']:.1f} ms); the difference is the "
        "project's glue (the copies of the state and the adjoint into TensorFlow, the finite "
        "check, the Python between scipy and TensorFlow)."
        f" The fused call takes {data['fused_call_after_work_ms']:.1f} ms when each one follows "
        "20 ms of other work on the calling thread, as inside the solve (TensorFlow's threads "
        "idle in between).",
        tf_targets(data) + (" With XLA (an option, not the target's setting): "
                            + tf_targets(xla, "") if xla else "")])


def tf_targets(data, label="Targets: "):
    """The tf_overhead benchmark's targets, met or not, from its results."""
    goal = data["targets"]
    glue = [f"{phase} {100 * data[phase]['glue_share']:.1f}%" for phase in ("forward", "backward")]
    glue_max = goal["glue_share_max"]
    glue_met = all(data[p]["glue_share"] <= glue_max for p in ("forward", "backward"))
    ratio, ratio_max = (data["backward_evaluation_over_fused_call"],
                        goal["backward_evaluation_over_fused_call_max"])
    return (f"{label}glue at most {100 * glue_max:.0f}% of the wall time ({', '.join(glue)}: "
            f"{'met' if glue_met else 'not met'}); a backward augmented evaluation at most "
            f"{ratio_max}x one fused call ({ratio:.2f}x: "
            f"{'met' if ratio <= ratio_max else 'not met'}).")


def benchmarks_section():
    return "\n\n".join(["## Benchmarks", "### Spiral demo: odeint_autograd against autograd "
                        "and torchdiffeq", spiral_demo_block(),
                        "### Memory: adjoint O(1) against direct backprop O(steps)",
                        memory_block(), "### TensorFlow dynamics: where the time goes",
                        tf_overhead_block()])


# ---------------------------------------------------------------- output

SECTIONS = {
    "mnist": mnist_section,
    "cnf": cnf_section,
    "spirals": spirals_section,
    "poisson": poisson_section,
}


def results_markdown():
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    parts = [
        "# Results: measured beside published",
        f"Written by `python -m reproduce report` on {now} from `figures/*/results.json` and "
        "`figures/benchmarks/*.json`. Every measured number comes from the run named above its "
        "table; the published numbers come from `reproduce/published.py` (Chen et al. 2018). "
        "A quick run is a shortened protocol (`--quick`): its numbers show that the "
        "experiment runs, not what the full protocol reaches."]
    for name, section in SECTIONS.items():
        parts.append(section(load(name)))
    parts.append(benchmarks_section())
    return "\n\n".join(parts) + "\n"


def update_readme_blocks(blocks, path=os.path.join(ROOT, "README.md")):
    """Replace each `<!-- generated:NAME -->...<!-- /generated:NAME -->` block of the README."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        text = f.read()
    for name, body in blocks.items():
        pattern = re.compile(rf"(<!-- generated:{name} -->\n).*?(<!-- /generated:{name} -->)",
                             re.S)
        text = pattern.sub(lambda m: m.group(1) + body.rstrip() + "\n" + m.group(2), text)
    with open(path, "w") as f:
        f.write(text)


def training_seconds(record):
    """The training time the checkpoints recorded, summed over the models (0 where the results
    do not say): a run that resumed finished models reports only its own duration."""
    res = record.get("results", {})
    if "training" in res:  # latent experiments: one summary, or one per model
        summaries = res["training"]
        summaries = [summaries] if "seconds_total" in summaries else list(summaries.values())
        return sum(s.get("seconds_total") or 0 for s in summaries)
    return sum(v["seconds"] for v in res.get("seconds_per_iteration", {}).values())  # cnf


def duration_text(record):
    """The run's own duration, and the training in earlier runs when it resumed trained models."""
    duration, trained = record.get("duration_s", 0), training_seconds(record)
    text = minutes(duration)
    if trained > duration:
        text += f" (+ {minutes(trained)} of training in the earlier runs it resumed)"
    return text


def readme_blocks():
    blocks = {"benchmarks": "\n\n".join(["### Spiral demo: against autograd and torchdiffeq",
                                         spiral_demo_block(), "### Memory: adjoint O(1), "
                                         "direct backprop O(steps)", memory_block()]),
              "tf_overhead": tf_overhead_block()}
    parts = []
    mnist, spirals = (best(load(n)) for n in ("mnist", "spirals"))
    if mnist:
        parts += [f"**Table 1, MNIST** ({mnist['mode']}: `{mnist['command']}`)",
                  mnist_tables(mnist), image(mnist, "figure3.png", "Figure 3")]
    if spirals:
        parts += [f"**Table 2, spirals**: extrapolation RMSE against the noise-free test points, "
                  f"mean ± sd over seeds (against the noisy ones in brackets) "
                  f"({spirals['mode']}: `{spirals['command']}`)", spirals_tables(spirals),
                  image(spirals, "fig9.png", "Figure 9")]
    for record in cnf_records(load("cnf")):
        fig4, fig6 = cnf_tables(record)
        parts += [f"**Figure 4, density matching**: KL(q || p) ({record['mode']}: "
                  f"`{record['command']}`)", fig4,
                  image(record, "figure4.png", "Figure 4"),
                  f"**Figure 6, maximum likelihood** ({record['mode']})", fig6,
                  image(record, "figure6.png", "Figure 6")]
    parts.append("Where each run was made, how long it took and every reproduction choice: "
                 "[figures/RESULTS.md](figures/RESULTS.md).")
    blocks["results"] = "\n\n".join(p for p in parts if p)
    rows = []
    for name in SECTIONS:
        for mode, record in sorted(load(name).items()):
            if name == "mnist" and mode == "full":  # several commands: one row per model below
                for key, label in MNIST_MODELS:
                    m = record["results"]["table1"].get(key)
                    if m and m.get("measured_epoch_seconds"):
                        rows.append(["mnist", "full", f"{label}, per epoch of 60,000 images: "
                                     f"`{m['command']}`", m["date"][:10],
                                     minutes(m["measured_epoch_seconds"])])
                continue
            rows.append([name, mode, f"`{record['command']}`", record.get("date", "?")[:10],
                         duration_text(record)])
    blocks["durations"] = table(["experiment", "mode", "command", "date", "duration"], rows)
    return blocks


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(prog="python -m reproduce report", description=__doc__)
    parser.add_argument("--out", default=os.path.join(FIGURES, "RESULTS.md"))
    parser.add_argument("--no-readme", action="store_true",
                        help="do not rewrite the README's generated blocks")
    parser.add_argument("--mode", choices=("full", "quick", "smoke"),
                        help="report only this mode's runs (default: full, else quick)")
    args = parser.parse_args(argv)
    if args.mode:
        MODES[:] = [args.mode]
    with open(args.out, "w") as f:
        f.write(results_markdown())
    if not args.no_readme:
        update_readme_blocks(readme_blocks())
    print(f"wrote {args.out}")
    return 0
