"""Table 1 and Figure 3 of the paper (Section 3): ODE-Net, RK-Net, ResNet and an MLP on MNIST.

Measured for each model: test error, parameter count, peak memory of a training step, time and
NFE.

    python -m reproduce mnist --quick                      # minutes: a subset, 1 epoch, all four
    python -m reproduce mnist --full --only odenet --resume              # the paper's protocol,
                                                                         # one model, resumable
    python -m reproduce mnist --full --only odenet --epochs 16 --resume  # budget: 16 of 160
    python -m reproduce mnist --full --models none      # memory, Figure 3, the table
    python -m reproduce mnist --full --evaluate-only    # Table 1 from the committed weights

Data: the four gzipped IDX files in --data-dir, $NEURAL_ODES_DATA or ~/.cache/neural-odes/mnist
(md5-checked; --download fetches missing ones). Each model (a unit: mlp, resnet, rknet, odenet)
trains with train.py's SGD schedule on randomly cropped batches, checkpointing every
--checkpoint-every batches and every epoch; --resume continues at the batch where a run stopped.
Each model writes train_<model>.json; results.json and table1.md gather every model's latest
file (each with its own command and epochs run), the memory measurements (memory.json,
memory.png) and Figure 3 (figure3.json, figure3.png) of the ODE-Net. --only trains models and
stops there; --models trains models and then measures and gathers.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ info and warning lines

import numpy as np  # noqa: E402

from reproduce.common import REFUSED, Run, now, positive, read_json, write_json  # noqa: E402

from . import data as D  # noqa: E402
from .models import LABELS, NAMES, ODE_TOL  # noqa: E402
from .train import BASE_BATCH, BASE_LR, LR_DROPS, MOMENTUM  # noqa: E402
from .train import PAPER_EPOCHS as FULL_EPOCHS  # noqa: E402


# What each mode runs. n_train / n_test: a fixed random subset (data seed 0) unless None (all).
SETTINGS = {
    "smoke": dict(n_train=64, n_test=64, batch_size=32, epochs=1, checkpoint_every=1,
                  memory_batch=32, memory_plan=dict(resnet=(2, 6), rk4=(1, 4), odenet=(1.0, 2.0)),
                  tols=(1e-1, 1e-2), ref_tol=1e-4, error_batch=8),
    "quick": dict(n_train=3072, n_test=1000, batch_size=128, epochs=1, checkpoint_every=10,
                  memory_batch=128,
                  memory_plan=dict(resnet=(1, 2, 4, 6, 8), rk4=(1, 2, 4), odenet=(1.0, 2.0, 4.0)),
                  tols=(1e-1, 1e-2, 1e-3, 1e-4, 1e-5), ref_tol=1e-7, error_batch=16),
    "full": dict(n_train=None, n_test=None, batch_size=128, epochs=FULL_EPOCHS,
                 checkpoint_every=25, memory_batch=128,
                 memory_plan=dict(resnet=(1, 2, 4, 6, 8, 12, 16), rk4=(1, 2, 4, 8),
                                  odenet=(1.0, 2.0, 4.0, 8.0)),
                 tols=(1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6),
                 ref_tol=1e-8, error_batch=16),
}

CHOICES = {
    "architecture": "the authors' public example (the paper gives only 'downsample twice, 6 "
                    "residual blocks'): conv 1->64 3x3, then twice GroupNorm(32)-ReLU-conv "
                    "64->64 4x4 stride 2 pad 1 (6x6x64 features); ResNet: 6 pre-activation "
                    "blocks GN-ReLU-conv3x3-GN-ReLU-conv3x3 (no bias); ODE-Net and RK-Net: "
                    "dynamics GN-ReLU-conv(65->64)-GN-ReLU-conv(65->64)-GN with t as an extra "
                    "channel, t in [0, 1]; head GN-ReLU-global average pool-linear 64->10",
    "ode_net": f"odeint method='adams' (scipy VODE, implicit Adams with functional iteration), "
               f"rtol = atol = {ODE_TOL:g} forward and backward (the paper's Section 6), "
               "gradients by the adjoint (Algorithm 1), full norm in the backward error control",
    "rk_net": f"the same network with odeint method='dopri5' (adaptive Dormand-Prince 5(4), "
              f"rtol = atol = {ODE_TOL:g}) and gradients by backpropagation through every stage "
              "(autograd records them): L~ is the adaptive solver's NFE, as in Table 1's "
              "O(L~) memory. A fixed-step RK4 would fix L~ by hand; it is used only in the "
              "memory sweep, where its number of steps is the controlled variable",
    "mlp": "784-300-10, ReLU, in autograd numpy, trained with the same protocol and "
           "augmentation as the others (Table 1 cites LeCun et al. 1998 for it; here it is run)",
    "precision": "float64 on the solver's side, float32 inside TensorFlow (the dynamics, blocks, "
                 "downsampling and head); the ODE dynamics compiled with XLA (jit_compile) unless "
                 "--no-xla",
    "training": f"SGD, momentum {MOMENTUM:g} (PyTorch's form: v = {MOMENTUM:g} v + g, step lr "
                f"v), no weight decay, lr {BASE_LR:g} for batch {BASE_BATCH} (scaled linearly "
                "with the batch), divided by 10 at epochs "
                f"{', '.join(map(str, LR_DROPS[:-1]))} and {LR_DROPS[-1]} of {FULL_EPOCHS} (a "
                "budget of E epochs: at the same fractions of training, epochs >= "
                + ", ".join(f"{d}/{FULL_EPOCHS} E" for d in LR_DROPS) + "); mean cross-entropy; "
                "PyTorch's default initialisation (uniform +-1/sqrt(fan_in), GroupNorm scale 1 "
                "shift 0) from a RandomState seeded by (seed, model name)",
    "data": "pixels scaled to [0, 1], no normalisation; training images randomly cropped back "
            "to 28x28 after zero-padding 4 pixels each side, offsets drawn per image per epoch; "
            "a fresh shuffle each epoch; the last partial batch of an epoch dropped (a new "
            "batch shape would retrace TensorFlow's functions); test batches padded to the "
            "batch size, padding ignored",
    "nfe": "forward NFE: dynamics evaluations of the forward solve (ResNet: its L blocks); "
           "backward NFE: evaluations of the dynamics' vector-Jacobian product (ODE-Net: the "
           "adjoint solve's augmented-dynamics evaluations; RK-Net: one per recorded stage)",
    "time": "seconds per training batch (loss, gradient, update, cropping) averaged over the "
            "batches of the run except each process's first (TensorFlow tracing and XLA "
            "compilation); a full epoch's time projected as that times the batches of a full epoch "
            "(468 of 128: the last partial batch is dropped)",
    "memory": "peak resident memory of one training step (loss and gradient) at the mode's "
              "memory batch, measured in a fresh subprocess with TensorFlow's oneDNN kernels "
              "off (TF_ENABLE_ONEDNN_OPTS=0: oneDNN's allocator keeps freed memory inside the "
              "process, hiding a step's peak from the kernel's counters) and glibc allocating "
              "blocks above 128 KiB with mmap: VmHWM (reset through /proc/self/clear_refs just "
              "before the step) minus VmRSS before it, after one unmeasured step of the same "
              "kind; numpy's share by tracemalloc beside it; untrained weights, the first test "
              "images",
    "figure3": "a trained ODE-Net and the first test images: (a) relative RMS error of z(1) "
               "against an adams solve at a much tighter tolerance, in float64 TensorFlow; (b) "
               "wall time of the float32 forward solve; (c) backward vs forward NFE of every "
               "training batch, and of the loss gradient at each tolerance of the sweep; (d) "
               "forward NFE of every training batch",
}


def add_args(parser):
    parser.add_argument("--data-dir", default=None,
                        help=f"folder with the four MNIST .gz files (default ${D.ENV}, else "
                             f"{D.DEFAULT_DIR})")
    parser.add_argument("--download", action="store_true",
                        help="download missing MNIST files (md5-checked)")
    parser.add_argument("--models", default=",".join(NAMES),
                        help=f"comma-separated subset of {','.join(NAMES)} (default all) to train "
                             "before measuring memory, redoing Figure 3 and gathering the "
                             "results; 'none' to train nothing")
    parser.add_argument("--epochs", type=positive(int), default=None,
                        help="train until this many epochs are done (default: the mode's; "
                             f"{FULL_EPOCHS} in --full); with --resume, continues a checkpoint "
                             "made with the same --epochs (the learning-rate schedule spans "
                             "them)")
    parser.add_argument("--checkpoint-every", type=positive(int), default=None,
                        help="checkpoint every N batches too (default: the mode's)")
    parser.add_argument("--no-memory", action="store_true",
                        help="skip the memory measurements (keep an earlier memory.json)")
    parser.add_argument("--no-figure3", action="store_true", help="skip Figure 3")
    parser.add_argument("--no-xla", action="store_true",
                        help="do not compile the ODE dynamics with XLA")


def units(run):
    """The units this run trains: one per Table 1 model of --models, narrowed by --only."""
    models = [m.strip() for m in run.args.models.split(",")]
    if models == ["none"]:
        models = []
    unknown = [m for m in models if m not in NAMES]
    if unknown:
        run.usage_error(f"--models: unknown {', '.join(map(repr, unknown))}; choose from "
                        f"{', '.join(NAMES)} (comma-separated) or none")
    return run.select(list(NAMES), models)


def make_run(argv=None):
    return Run("mnist", argv, extra_args=add_args, description=__doc__.split("\n")[0])


def main(argv=None):
    run = make_run(argv)
    try:
        return _main(run)
    except D.MNISTDataError as error:
        print(f"python -m reproduce mnist: error: {error}", file=sys.stderr)
        return 1 if isinstance(error, D.MNISTDownloadError) else REFUSED  # 1: may be retried


def _main(run):
    args, s = run.args, dict(SETTINGS[run.mode])
    models = units(run)
    epochs = args.epochs or s["epochs"]
    checkpoint_every = args.checkpoint_every or s["checkpoint_every"]

    mnist = D.load(args.data_dir, fetch=args.download)
    train_set = _subset(mnist["train"], s["n_train"], salt=1)
    test_set = _subset(mnist["test"], s["n_test"], salt=2)

    from .models import make_model
    from .train import evaluate, load_trained, train, train_config
    states = {}
    for name in models:
        model = make_model(name, jit=not args.no_xla)
        made_by = _made_by(run)
        if args.evaluate_only:  # each model as it was trained: its own epochs and XLA setting
            config = train_config(run, model, train_set, test_set, epochs, s["batch_size"])
            state = load_trained(run, name, config,
                                 ignore=("no_xla",) if args.epochs else ("epochs", "no_xla"))
            if state is None:
                print(f"{LABELS[name]}: no checkpoint or final weights to evaluate",
                      file=sys.stderr)
                continue
            model = make_model(name, jit=not state["config"]["no_xla"])
            made_by.update(command=state.get("command", "?"), evaluated_by=run.command)
            check = evaluate(model, state["params"], *test_set, s["batch_size"])
            trained = state["history"][-1]["test_error_pct"] if state["history"] else None
            print(f"{LABELS[name]}: test error {check['test_error_pct']:.2f}% re-evaluated "
                  f"from the saved weights (at the end of training: {trained}%)",
                  file=sys.stderr)
        else:
            state = train(run, model, train_set, test_set, epochs, s["batch_size"],
                          checkpoint_every)
        made_by["trained"] = state.get("trained")  # None: no date in these weights (older ones)
        states[name] = state
        planned = state["config"]["epochs"]
        write_json(run.path(f"train_{name}.json"), {
            **made_by, "seed": run.seed, **_model_summary(state, planned)}, indent=1)
        print(f"{LABELS[name]}: {_one_line(state)}", file=sys.stderr)
    if run.partial:
        return 0

    if not args.no_memory:
        _memory(run, s, mnist["test"])
    if not args.no_figure3:
        _figure3(run, s, states.get("odenet"), test_set)
    return _gather(run, s)


# ---------------------------------------------------------------------------------------------


def _made_by(run):
    """The command, mode and date that head every file the experiment writes."""
    return {"command": run.command, "mode": run.mode, "date": now()}


def _say(message):
    print(message, file=sys.stderr)


def _first(split, n):
    """The first n images (as floats) and labels of a split."""
    return D.to_float(split[0][:n]), split[1][:n]


def _subset(split, n, salt):
    """A fixed random subset of n examples (data seed 0), the whole split if n is None."""
    images, labels = split
    if n is None or n >= len(images):
        return images, labels
    idx = np.sort(np.random.RandomState([0, salt]).choice(len(images), n, replace=False))
    return images[idx], labels[idx]


def _model_summary(state, epochs_planned):
    """What Table 1 needs from a training state, plus the per-epoch history."""
    batches = state["batches"]
    timed = [b["seconds"] for b in batches if not b["warmup"]] or [b["seconds"] for b in batches]
    last = state["history"][-1] if state["history"] else {}

    def mean(key):
        values = [b[key] for b in batches]
        return None if not values or values[0] is None else float(np.mean(values))

    per_batch = float(np.mean(timed)) if timed else None
    return {
        "config": state["config"], "n_params": state["n_params"],
        "epochs_run": state["epoch"], "epochs_planned": epochs_planned,
        "batches_run": len(batches), "n_train": state["config"]["n_train"],
        "n_test": state["config"]["n_test"], "test_error_pct": last.get("test_error_pct"),
        "test_nfe_forward": last.get("test_nfe_forward"),
        "seconds_per_batch": per_batch,
        "projected_epoch_seconds": None if per_batch is None else
        per_batch * (60000 // state["config"]["batch_size"]),
        "measured_epoch_seconds": float(np.mean([h["train_seconds"] for h in state["history"]]))
        if state["history"] and state["config"]["n_train"] == 60000 else None,
        "train_seconds": float(np.sum([b["seconds"] for b in batches])),
        "mean_nfe_forward": mean("nfe_forward"), "mean_nfe_backward": mean("nfe_backward"),
        "history": state["history"],
    }


def _one_line(state):
    h = state["history"][-1] if state["history"] else {}
    return (f"{state['epoch']} epoch(s), test error {h.get('test_error_pct', float('nan')):.2f}%"
            f", {h.get('seconds_per_batch', float('nan')):.3f} s/batch")


def _memory_plan(s):
    plan = [{"model": "mlp"}]
    plan += [{"model": "resnet", "n_blocks": L} for L in s["memory_plan"]["resnet"]]
    plan += [{"model": "rknet", "method": "rk4", "steps": n} for n in s["memory_plan"]["rk4"]]
    plan += [{"model": "rknet"}]
    plan += [{"model": "odenet", "t_end": T} for T in s["memory_plan"]["odenet"]]
    return plan


def _memory(run, s, test):
    from . import figures, memory
    if not memory.supported():
        return _say("peak memory not measured: /proc/self/clear_refs is not available")
    batch, plan = s["memory_batch"], _memory_plan(s)
    _say(f"measuring peak memory of {len(plan)} training steps (batch {batch}) in a "
         "subprocess...")
    rows = memory.measure(plan, *_first(test, batch), seed=run.seed)
    record = {**_made_by(run), "batch": batch,
              "rows": rows,
              "slopes_mb": {
                  "resnet_per_block": memory.slope([r for r in rows if r["model"] == "resnet"],
                                                   "n_blocks"),
                  "rk4_per_nfe": memory.slope([r for r in rows if r.get("method") == "rk4"],
                                              "nfe_forward"),
                  "odenet_per_nfe": memory.slope([r for r in rows if r["model"] == "odenet"],
                                                 "nfe_forward")}}
    write_json(run.path("memory.json"), record, indent=1)
    figures.plot_memory(run.path("memory.png"), rows, run.mode, batch)


def _figure3(run, s, state, test_set):
    from . import figures
    if state is None:  # not trained in this run: the latest checkpoint or final weights
        from .train import load_trained
        state = load_trained(run, "odenet", None)
        if state is None or not state["history"]:
            return _say("Figure 3 skipped: no trained ODE-Net (train it with --only odenet)")
    _say(f"Figure 3: tolerance sweep {s['tols']} on the ODE-Net after {state['epoch']} "
         "epoch(s)...")
    sweep = figures.figure3_sweep(state["params"], *_first(test_set, s["batch_size"]), s["tols"],
                                  s["ref_tol"], s["error_batch"], not state["config"]["no_xla"])
    record = {**_made_by(run), "odenet_epochs": state["epoch"], "odenet_config": state["config"],
              **sweep,
              "training_nfe_per_epoch": [
                  {"epoch": h["epoch"], "mean_nfe_forward": h["mean_nfe_forward"],
                   "mean_nfe_backward": h["mean_nfe_backward"]} for h in state["history"]],
              "backward_over_forward_training": float(
                  np.mean([b["nfe_backward"] for b in state["batches"]])
                  / np.mean([b["nfe_forward"] for b in state["batches"]]))}
    write_json(run.path("figure3.json"), record, indent=1)
    n_batches = state["config"]["n_train"] // state["config"]["batch_size"]
    figures.plot_figure3(run.path("figure3.png"), sweep, state["batches"], run.mode, n_batches)


def _gather(run, s):
    """results.json and table1.md from every model's latest train_<model>.json, memory.json and
    figure3.json in this mode's output folder."""
    from . import figures
    memory = read_json(run.path("memory.json"))
    standard = {"mlp": lambda r: r["model"] == "mlp",
                "resnet": lambda r: r["model"] == "resnet" and r["n_blocks"] == 6,
                "rknet": lambda r: r["model"] == "rknet" and "method" not in r,
                "odenet": lambda r: r["model"] == "odenet" and r["t_end"] == 1.0}
    table = {}
    for name in NAMES:
        record = read_json(run.path(f"train_{name}.json"))
        if record is None:
            continue
        row = dict(record)
        mem = [r for r in (memory or {}).get("rows", []) if standard[name](r)]
        row["peak_memory_mb"] = mem[0]["peak_mb"] if mem else None
        row["peak_memory_batch"] = memory["batch"] if mem else None
        table[name] = row
    batch = next((m["peak_memory_batch"] for m in table.values() if m.get("peak_memory_batch")),
                  "-")
    with open(run.path("table1.md"), "w") as f:
        f.write(f"# Table 1 (Chen et al. 2018), measured [{run.mode}]\n\n"
                f"{figures.table1(table)}\n\nmin / epoch: measured where whole epochs on all "
                "60,000 images ran, else projected (proj.) as s / batch x the batches of a full "
                f"epoch (468 of 128). Peak memory: one training step at batch {batch}, resident "
                "memory (see the choices in results.json).\n")
    results = {"table1": table, "memory": memory, "figure3": read_json(run.path("figure3.json")),
               "settings": {k: v for k, v in s.items()}}
    if run.mode != "full":
        results["note"] = (f"{run.mode} run: {s['n_train']} training images, {s['epochs']} "
                           "epoch(s) unless --epochs; not the paper's protocol")
    else:
        short = [f"{LABELS[name]} {row['epochs_run']} of {row['epochs_planned']} planned"
                 for name, row in table.items() if row["epochs_run"] < row["epochs_planned"]]
        budget = sorted({row["epochs_planned"] for row in table.values()
                         if row["epochs_planned"] < FULL_EPOCHS})
        notes = []
        if budget:
            notes.append("budget protocol: " + ", ".join(f"{e} of {FULL_EPOCHS} epochs"
                                                         for e in budget)
                         + ", the paper's schedule compressed (the learning rate / 10 at the same"
                           " fractions of training as epochs 60, 100, 140 of 160)")
        if short:
            notes.append("partial run: " + ", ".join(short)
                         + "; test errors are after the epochs run")
        if notes:
            results["note"] = "; ".join(notes)
    run.save_results(results, CHOICES)
    return 0
