"""Training and evaluation: SGD with momentum over epochs of shuffled, randomly cropped batches,
resumable at any batch.

A checkpoint holds the parameters, the optimiser's velocity, the RNG state (after the batch's
crop offsets were drawn), the epoch's permutation, the epoch's running sums and the per-epoch
history, so a run resumed after a kill continues with exactly the numbers of an uninterrupted
one. The per-batch log (loss, NFE, seconds) is appended to a file beside the checkpoint
(common.AppendLog), so a save costs the same at the first epoch as at the last.
"""
import time

import numpy as np
from autograd import value_and_grad
from autograd.tracer import getval

from reproduce.common import SGD, model_rng, now

from . import data as D
from .models import cross_entropy, n_params

BASE_LR, BASE_BATCH, MOMENTUM = 0.1, 128, 0.9
PAPER_EPOCHS = 160
LR_DROPS = (60, 100, 140)  # the paper's schedule: the learning rate / 10 at these epochs of 160


def learning_rate(epoch, epochs=PAPER_EPOCHS, batch_size=BASE_BATCH):
    """0.1 for batch 128 (scaled linearly with the batch), divided by 10 at the same fractions
    of training as epochs 60, 100 and 140 of the paper's 160 (epoch counted from 0): a run of
    E epochs drops it once epoch >= 60/160 E, and so on."""
    drops = sum(epoch >= d * epochs / PAPER_EPOCHS for d in LR_DROPS)
    return BASE_LR * batch_size / BASE_BATCH * 0.1 ** drops


def evaluate(model, params, images, labels, batch_size):
    """Test error (%), mean loss and mean forward NFE per batch. The last batch is padded to
    `batch_size` (padding rows ignored) so that no new input shape is traced."""
    wrong, loss, nfe = 0, 0.0, []
    for start in range(0, len(images), batch_size):
        x = D.to_float(images[start:start + batch_size])
        y = labels[start:start + batch_size]
        n = len(x)
        if n < batch_size:
            x = np.concatenate([x, np.zeros((batch_size - n,) + x.shape[1:])])
        mark = model.mark()
        logits = model.logits(params, x)[:n]
        nfe.append(model.counts_since(mark)[0])
        wrong += int(np.sum(np.argmax(logits, axis=1) != y))
        loss += float(cross_entropy(logits, y)) * n
    return {"test_error_pct": 100.0 * wrong / len(images), "test_loss": loss / len(images),
            "test_nfe_forward": None if nfe[0] is None else float(np.mean(nfe))}


def fresh_state(model, seed, config):
    """Initial parameters and RNG from (seed, model name): each model's numbers do not depend on
    which other models run, or in which order."""
    rng = model_rng(seed, model.name)
    params = model.init(rng)
    return {"config": config, "params": params, "opt": SGD(BASE_LR, MOMENTUM).state_dict(),
            "rng": rng.get_state(), "epoch": 0, "batch": 0, "perm": None, "running": None,
            "log_size": 0, "epoch_log_start": 0, "history": [], "n_params": n_params(params)}


def train_config(run, model, train_set, test_set, epochs, batch_size):
    """What a checkpoint of this model must match: the run's configuration (mode, seed, every
    flag that changes numbers) and the training set-up."""
    return dict(run.config, model=model.name, n_train=len(train_set[0]),
                n_test=len(test_set[0]), batch_size=batch_size, epochs=epochs)


def load_trained(run, name, config, ignore=()):
    """The state of a model for evaluation only: its checkpoint, else its final weights (a full
    run's are committed); None if neither exists. Both must match `config` but for the keys in
    `ignore`. Batches come as state["batches"] (the per-batch log, or the weights' copy)."""
    state = run.checkpoint(name).load(config, force=True, ignore=ignore)
    if state is not None:
        state["batches"] = run.log(name).read(state["log_size"])
        return state
    return _with_batches(run.final_weights(name).load(config, force=True, ignore=ignore))


def _with_batches(final):
    """Final weights (or None) with their compact batch columns expanded to the per-batch log."""
    if final is not None and isinstance(final["batches"], dict):
        final["batches"] = expand_batches(final["batches"])
    return final


# What the final weights keep of each batch (Table 1's times and NFE, Figure 3's NFE), compactly.
BATCH_COLUMNS = {"epoch": np.int16, "batch": np.int16, "nfe_forward": np.int16,
                 "nfe_backward": np.int16, "seconds": np.float32, "warmup": bool}


def compact_batches(rows):
    """The per-batch log as a few typed columns (NFE None -> -1)."""
    return {k: np.array([-1 if r[k] is None else r[k] for r in rows], dtype=dtype)
            for k, dtype in BATCH_COLUMNS.items()}


def expand_batches(columns):
    """compact_batches' inverse: a list of per-batch dicts of Python numbers."""
    keys = list(BATCH_COLUMNS)
    return [{k: (None if k.startswith("nfe") and v == -1 else v.item())
             for k, v in zip(keys, values)} for values in zip(*(columns[k] for k in keys))]


def train(run, model, train_set, test_set, epochs, batch_size, checkpoint_every):
    """Train `model` for `epochs` epochs (continuing a checkpoint under --resume); returns the
    final state, with state["batches"] the per-batch log. Batches: a fresh permutation each
    epoch, the last partial batch dropped (a new batch size would retrace TensorFlow's
    functions), each image randomly cropped (padding 4). After each epoch the test set is
    evaluated. A run that finishes also writes its final weights (Run.final_weights). This is
    MNIST's own loop rather than common.fit: it works in epochs of shuffled batches and keeps the
    epoch's permutation and running sums in its checkpoint."""
    images, labels = train_set
    config = train_config(run, model, train_set, test_set, epochs, batch_size)
    ckpt = run.checkpoint(model.name)
    log = run.log(model.name)
    state = ckpt.load(config)
    if state is None and run.args.resume:  # finished earlier and kept only as final weights?
        done = run.final_weights(model.name).load(config, force=True)
        if done is not None and done["epoch"] == epochs:
            return _with_batches(done)
    if state is None:
        state = fresh_state(model, run.seed, config)
    log.restore(state["log_size"])
    opt = SGD(BASE_LR, MOMENTUM)
    opt.load_state_dict(state["opt"])
    rng = np.random.RandomState()
    rng.set_state(state["rng"])
    params = state["params"]
    n_batches = len(images) // batch_size
    if n_batches == 0:
        raise ValueError(f"{len(images)} training images do not fill one batch of {batch_size}")
    first_in_process = True

    while state["epoch"] < epochs:
        epoch = state["epoch"]
        lr = learning_rate(epoch, epochs, batch_size)
        if state["batch"] == 0:
            state["perm"] = rng.permutation(len(images))
            state["running"] = {"loss": 0.0, "correct": 0, "seen": 0}
            state["epoch_log_start"] = log.size()
        start_batch = state["batch"]
        resumed = f", resumed at batch {start_batch}" if start_batch else ""
        bar = run.progress(range(start_batch, n_batches), total=n_batches - start_batch,
                           desc=f"{model.name} epoch {epoch + 1}/{epochs}{resumed}")
        for b in bar:
            started = time.perf_counter()
            idx = state["perm"][b * batch_size:(b + 1) * batch_size]
            x = D.to_float(D.random_crop(rng, images[idx]))
            y = labels[idx]
            seen = {}

            def loss_fn(p):
                logits = model.logits(p, x)
                seen["logits"] = getval(logits)
                return cross_entropy(logits, y)

            mark = model.mark()
            loss, grads = value_and_grad(loss_fn)(params)
            if not np.isfinite(loss):
                raise FloatingPointError(f"{model.name}: loss {loss} at epoch {epoch}, batch {b}")
            params = opt.step(params, grads, lr=lr)
            nfe_f, nfe_b = model.counts_since(mark)
            correct = int(np.sum(np.argmax(seen["logits"], axis=1) == y))
            seconds = time.perf_counter() - started
            r = state["running"]
            r["loss"] += float(loss) * len(y)
            r["correct"] += correct
            r["seen"] += len(y)
            log.append({"epoch": epoch, "batch": b, "loss": float(loss),
                        "accuracy": correct / len(y), "nfe_forward": nfe_f,
                        "nfe_backward": nfe_b, "seconds": seconds, "warmup": first_in_process})
            first_in_process = False
            nfe = {} if nfe_f is None else {"nfe_f": nfe_f, "nfe_b": nfe_b}
            run.set_postfix(loss=float(loss), acc=r["correct"] / r["seen"], **nfe)
            state.update(params=params, opt=opt.state_dict(), rng=rng.get_state(), batch=b + 1,
                         log_size=log.size())
            if (b + 1) % checkpoint_every == 0 and b + 1 < n_batches:
                ckpt.save(state)
            run.stopper.tick()
        rows = log.read(state["log_size"], start=state["epoch_log_start"])
        state["history"].append(_epoch_summary(model, params, state, rows, epoch, lr, test_set,
                                               batch_size))
        state.update(epoch=epoch + 1, batch=0, perm=None, running=None)
        if state["epoch"] == epochs:
            state["trained"] = now()  # kept by the checkpoint: a resume of it keeps the date
        ckpt.save(state)
    state["batches"] = log.read(state["log_size"])
    if not run.args.evaluate_only:
        keep = ("config", "params", "epoch", "history", "n_params")
        run.final_weights(model.name).save({k: state[k] for k in keep} | {
            "log_size": 0, "batches": compact_batches(state["batches"]), "command": run.command,
            "trained": state.get("trained")})
    return state


def _epoch_summary(model, params, state, rows, epoch, lr, test_set, batch_size):
    timed = [r["seconds"] for r in rows if not r["warmup"]] or [r["seconds"] for r in rows]
    started = time.perf_counter()
    test = evaluate(model, params, *test_set, batch_size)
    summary = {"epoch": epoch + 1, "lr": lr,
               "train_loss": state["running"]["loss"] / state["running"]["seen"],
               "train_error_pct": 100.0 * (1 - state["running"]["correct"]
                                           / state["running"]["seen"]),
               "batches": len(rows),
               "train_seconds": float(np.sum([r["seconds"] for r in rows])),
               "seconds_per_batch": float(np.mean(timed)),
               "test_seconds": time.perf_counter() - started}
    for key in ("nfe_forward", "nfe_backward"):
        values = [r[key] for r in rows]
        summary[f"mean_{key}"] = None if values[0] is None else float(np.mean(values))
    summary.update(test)
    return summary
