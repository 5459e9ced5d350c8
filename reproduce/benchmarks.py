"""The generated blocks of docs/benchmarks.md, from the benchmarks' JSON files in
figures/benchmarks/ (written by the scripts in benchmarks/)."""
import os

from reproduce.common import read_json
from reproduce.markdown import FIGURES, fmt, table


def benchmark(name):
    return read_json(os.path.join(FIGURES, "benchmarks", f"{name}.json"))


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
    runs = [("", data)] + ([(" (XLA)", xla)] if xla else [])
    rows = [[phase + label] + [run[phase][k] for k in ("wall_s", "tf_share", "scipy_share",
                                                        "glue_share", "nfe", "tf_ms_per_call",
                                                        "evaluation_ms", "scipy_ms_per_step")]
            for label, run in runs for phase in ("forward", "backward")]
    return "\n\n".join([
        f"`{data.get('command')}` ({data.get('date')}): the MNIST ODE block (batch 128, "
        "6x6x64) with Adams at tol 1e-3, split into time inside TensorFlow, scipy's own solver "
        "time, and the project's glue."
        + (f" The (XLA) rows: `{xla.get('command')}` ({xla.get('date')}), the same with "
           "`tf_primitive(..., jit_compile=True)`." if xla else ""),
        table(["phase", "wall s", "TF share", "scipy share", "glue share", "NFE",
               "TF ms per call", "ms per evaluation", "scipy ms/step"], rows),
        "scipy alone, the same solver on states of the forward's and the backward's size with "
        "dynamics that cost nothing (dy/dt = -y):",
        table(["state", "numbers", "scipy ms/step", "ns per number per step"],
              [[name.replace("_", " "), r["size"], r["scipy_ms_per_step"],
                1e6 * r["scipy_ms_per_step"] / r["size"]]
               for name, r in data["scipy_alone"].items()]),
        f"One backward evaluation (one `value_and_vjp` call and the negations and concatenation "
        f"of its parts in numpy) takes {data['backward_evaluation_over_fused_call']:.2f}x one "
        f"fused TensorFlow value+VJP call timed on its own, back to back "
        f"({data['fused_value_vjp_call_ms']:.1f} ms; the target's measure), and "
        f"{data['backward_evaluation_over_its_tf_call']:.2f}x its TensorFlow call as timed "
        f"inside the solve ({data['backward']['tf_ms_per_call']:.1f} ms); the difference is the "
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


def mnist_step_block():
    """benchmarks/mnist_step.py: one SGD step of each Table 1 model, against PyTorch."""
    data = benchmark("mnist_step")
    if data is None:
        return "MNIST step benchmark: not run yet (`python benchmarks/mnist_step.py`)."
    rows, goal = [], data["targets"]
    for name, m in data["models"].items():
        ours, torch = m["ours"], m.get("pytorch")
        nfe = (f"{fmt(ours['nfe_forward_median'])} / {fmt(ours['nfe_backward_median'])}"
               if ours.get("nfe_forward_median") else "-")
        torch_nfe = (f"{fmt(torch['nfe_forward_median'])} / {fmt(torch['nfe_backward_median'])}"
                     if torch and torch.get("nfe_forward_median") else "-")
        limit = goal.get(f"{name}_ratio_max")
        verdict = ("-" if limit is None or not torch else
                   f"<= {limit}: {'met' if m['ratio'] <= limit else 'not met'}")
        rows.append([name, ours["step_s"], torch["step_s"] if torch else "-",
                     m.get("ratio", "-"), verdict, nfe, torch_nfe,
                     ours.get("tf_s_median", "-")])
    load = data.get("load_average", [[None]])[0][0]
    return "\n\n".join([
        f"`{data['command']}` ({data['date']}, load average {fmt(load, 2)} before the run; "
        f"{data['settings']['steps']} timed steps after {data['settings']['warmup']} warm-up, "
        f"both libraries interleaved in one process, median; {data['settings']['threads']} "
        f"threads each; CPU: {data['machine'].get('processor')}, {data['machine'].get('cpus')} "
        "cores): one SGD step at batch 128 on real MNIST, the same architectures and initial "
        "parameters on both sides (docs/mnist_step.md).",
        table(["model", "ours s", "PyTorch s", "ratio", "target", "NFE fwd / bwd",
               "torchdiffeq NFE", "of which TensorFlow s"], rows)])


def nfe_ratio_block():
    """benchmarks/nfe_ratio.py: Figure 3(c), backward / forward NFE per solver setting."""
    data = benchmark("nfe_ratio")
    if data is None:
        return "Figure 3(c) benchmark: not run yet (`python benchmarks/nfe_ratio.py`)."
    return "\n\n".join([
        f"`{data['command']}` ({data['date']}): one loss gradient of the ODE-Net "
        f"({data['model']}) on each of {data['batches']} test batches of 128, forward tolerance "
        f"{data['forward_tol']:g}; mean NFE. The first row is the training setting.",
        nfe_ratio_table(data, seconds=True)])


def nfe_ratio_table(data, seconds=False):
    """The nfe_ratio benchmark's rows as a markdown table (the seconds per gradient if asked)."""
    rows = [[r["method"], r["adjoint_method"], f"{r['adjoint_tol']:g}",
             "seminorm" if r["seminorm"] else "full", r["nfe_forward"], r["nfe_backward"],
             f"{r['backward_over_forward']:.2f}"] + [r["seconds_per_gradient"]] * seconds
            for r in data["rows"]]
    return table(["forward", "adjoint", "adjoint tol", "error norm", "NFE fwd", "NFE bwd",
                  "bwd / fwd"] + ["s per gradient"] * seconds, rows)


def spirals_adjoint_table(data):
    """The spirals_adjoint benchmark's rows as a markdown table."""
    return table(["n", "adjoint", "tol", "s per gradient", "NFE fwd", "NFE bwd",
                  "error against the tight solve"],
                 [[r["n"], r["adjoint_method"], f"{r['tol']:.0e}", f"{r['seconds']:.3f}",
                   r["nfe_forward"], r["nfe_backward"], f"{r['relative_error']:.1e}"]
                  for r in data["rows"]])


def spirals_adjoint_block():
    """benchmarks/spirals_adjoint.py: the spirals latent ODE's adjoint method."""
    data = benchmark("spirals_adjoint")
    if data is None:
        return "Spirals adjoint benchmark: not run yet (`python benchmarks/spirals_adjoint.py`)."
    return "\n\n".join([
        f"`{data['command']}` ({data['date']}, {data['machine'].get('cpus')} CPUs, quiet): one "
        f"training gradient of {data['weights']} (minibatch of 100 training spirals, forward by "
        "Adams at the same tolerance), the fastest of the repeats; the error is the gradient's "
        "relative L2 distance from the first row's.",
        spirals_adjoint_table(data)])


def executors_block():
    """benchmarks/executors.py: `reproduce all --quick` per executor."""
    data = benchmark("executors")
    if data is None:
        return "Executor benchmark: not run yet (`python benchmarks/executors.py`)."
    rows = [[name, f"`{data['commands'][name]}`", data["wall_s"][name],
             f"{data['speedup_over_local'][name]:.2f}",
             data["load_average_1min_before"][name]] for name in data["wall_s"]]
    return "\n\n".join([
        f"`{data['command']}` ({data['date']}, {data['machine'].get('cpus')} CPUs; "
        f"{data['note']}):",
        table(["executor", "command", "wall s", "speed-up over local",
               "load average before"], rows)])


def threads_block():
    """benchmarks/threads.py: odeint and scipy's ode on two threads, every answer checked."""
    data = benchmark("threads")
    if data is None:
        return "Threads benchmark: not run yet (`python benchmarks/threads.py`)."

    def outcomes(tally):
        return ", ".join(f"{key} {tally[key]}" for key in sorted(tally))

    rows = [[row["method"], outcomes(row["odeint_outcomes"]), row["scipy"],
             outcomes(row["scipy_outcomes"])] for row in data["rows"]]
    return "\n\n".join([
        f"`{data['command']}` ({data['date']}): {data['seconds']:g} s per method, switch "
        f"interval {data['switch_interval']:g} s; odeint's answers not right and scipy's wrong or "
        f"failed, in all: {data['wrong_or_failed']}.",
        table(["odeint method", "odeint's outcomes", "beside", "scipy's outcomes"], rows)])


def interrupts_block():
    """benchmarks/interrupts.py: Ctrl-C at random moments of solves, nothing left held."""
    data = benchmark("interrupts")
    if data is None:
        return "Interrupts benchmark: not run yet (`python benchmarks/interrupts.py`)."
    rows = [[how, f"{1e3 * data['longest_interrupt_s'][how]:.2f}", row["finished"],
             row["interrupted"], row["left_held"]]
            for how, row in data["solves"].items()]
    return "\n\n".join([
        f"`{data['command']}` ({data['date']}): {data['seconds']:g} s of solves, each "
        "interrupted at a random moment from 10 us to 2 ms, or to 1.5 times the median time of "
        "its kind of solve where that is longer; solves that left a lock held or descriptor 1 "
        f"redirected: {data['left_held']}; file descriptors leaked in all: "
        f"{data['descriptors_leaked']}.",
        table(["solve", "interrupts drawn up to (ms)", "finished", "interrupted",
               "left something held"], rows)])


def blocks():
    """{block name: markdown} for docs/benchmarks.md."""
    return {"benchmarks": "\n\n".join(["### Spiral demo: against autograd and torchdiffeq",
                                         spiral_demo_block(), "### Memory: adjoint O(1), "
                                         "direct backprop O(steps)", memory_block()]),
            "tf_overhead": tf_overhead_block(), "mnist_step": mnist_step_block(),
            "nfe_ratio": nfe_ratio_block(), "executors": executors_block(),
            "spirals_adjoint": spirals_adjoint_block(), "threads": threads_block(),
            "interrupts": interrupts_block()}
