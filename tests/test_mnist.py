"""MNIST (Table 1, Figure 3): the IDX parser and the md5 checks, the augmentation, the four
models (shapes, parameter counts, gradients against finite differences and ODE-Net's adjoint
against direct backprop through Runge-Kutta), a training step, resume after a kill, a --smoke run.

The real MNIST files are looked for in $NEURAL_ODES_DATA (`make test` passes it on); tests that
need them are skipped when they are not there.
"""
import gzip
import hashlib
import json
import os

import numpy as np
import pytest
from autograd import grad, value_and_grad
from autograd.misc import flatten

from reproduce.mnist import data as D

pytest.importorskip("tensorflow")
from reproduce import mnist  # noqa: E402
from reproduce.mnist import models as M  # noqa: E402
from reproduce.mnist.train import SGD, evaluate, learning_rate  # noqa: E402


from conftest import have_mnist, needs_mnist  # noqa: E402


def write_idx_gz(path, array, code):
    header = bytes([0, 0, code, array.ndim]) + np.array(array.shape, ">u4").tobytes()
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(D.IDX_TYPES[code]).tobytes())
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


# ---------------------------------------------------------------------------------------------
# Data


def test_idx_parser_reads_what_it_is_given(tmp_path):
    rng = np.random.RandomState(0)
    images = rng.randint(0, 256, (5, 4, 3)).astype(np.uint8)
    labels = rng.randint(0, 10, 5).astype(np.uint8)
    floats = rng.randn(2, 3).astype(np.float32)
    ints = rng.randint(-1000, 1000, 7).astype(np.int32)
    for name, array, code in (("i.gz", images, 0x08), ("l.gz", labels, 0x08),
                              ("f.gz", floats, 0x0D), ("n.gz", ints, 0x0C)):
        write_idx_gz(tmp_path / name, array, code)
        out = D.read_idx_gz(str(tmp_path / name))
        assert out.shape == array.shape and out.dtype.isnative
        np.testing.assert_array_equal(out, array)


def test_idx_parser_rejects_bad_bytes(tmp_path):
    good = bytes([0, 0, 8, 1]) + np.array([3], ">u4").tobytes() + bytes([1, 2, 3])
    np.testing.assert_array_equal(D.parse_idx(good), [1, 2, 3])
    with pytest.raises(D.MNISTDataError, match="magic"):
        D.parse_idx(b"\x01" + good[1:])
    with pytest.raises(D.MNISTDataError, match="type code"):
        D.parse_idx(good[:2] + b"\x07" + good[3:])
    with pytest.raises(D.MNISTDataError, match="needs 3"):
        D.parse_idx(good[:-1])
    with pytest.raises(D.MNISTDataError, match="truncated"):
        D.parse_idx(bytes([0, 0, 8, 3, 0, 0]))
    (tmp_path / "x.gz").write_bytes(b"not gzip at all")
    with pytest.raises(D.MNISTDataError, match="decompress"):
        D.read_idx_gz(str(tmp_path / "x.gz"))


def test_missing_and_corrupt_files_are_named(tmp_path):
    digest = write_idx_gz(tmp_path / "a.gz", np.arange(4, dtype=np.uint8), 0x08)
    D.check(str(tmp_path), {"a.gz": digest})  # passes
    with pytest.raises(D.MNISTDataError, match=r"b\.gz is missing.*--download"):
        D.check(str(tmp_path), {"a.gz": digest, "b.gz": digest})
    with pytest.raises(D.MNISTDataError, match=r"a\.gz is corrupt.*md5 " + digest):
        D.check(str(tmp_path), {"a.gz": "0" * 32})
    with pytest.raises(D.MNISTDataError, match="train-images-idx3-ubyte.gz is missing"):
        D.load(str(tmp_path))


def test_data_dir_order(monkeypatch, tmp_path):
    monkeypatch.setenv(D.ENV, str(tmp_path))
    assert D.data_dir() == str(tmp_path)
    assert D.data_dir(str(tmp_path / "x")) == str(tmp_path / "x")
    monkeypatch.delenv(D.ENV)
    assert D.data_dir() == os.path.expanduser(os.path.join("~", ".cache", "neural-odes", "mnist"))


def test_download_keeps_only_files_with_the_right_md5(tmp_path):
    """Mirrors are tried in order; a file with the wrong md5 is never kept (file:// URLs stand
    in for the network)."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    digest = write_idx_gz(good / "a.gz", np.arange(4, dtype=np.uint8), 0x08)
    write_idx_gz(bad / "a.gz", np.arange(5, dtype=np.uint8), 0x08)
    target = tmp_path / "data"
    files = {"a.gz": digest}
    with pytest.raises(D.MNISTDownloadError, match=r"could not download MNIST file a\.gz(.|\n)*"
                                               r"md5 .*expected(.|\n)*No such file"):
        D.download(str(target), files, mirrors=(bad.as_uri() + "/", (tmp_path / "no").as_uri()
                                                + "/"))
    assert os.listdir(target) == []  # nothing half-written or wrong left behind
    D.download(str(target), files, mirrors=(bad.as_uri() + "/", good.as_uri() + "/"))
    D.check(str(target), files)


@needs_mnist
def test_real_mnist_matches_its_published_counts():
    mnist = D.load()
    (xtr, ytr), (xte, yte) = mnist["train"], mnist["test"]
    assert xtr.shape == (60000, 28, 28) and xte.shape == (10000, 28, 28)
    assert xtr.dtype == np.uint8 and xtr.max() == 255
    np.testing.assert_array_equal(np.bincount(ytr), [5923, 6742, 5958, 6131, 5842, 5421, 5918,
                                                     6265, 5851, 5949])
    np.testing.assert_array_equal(np.bincount(yte), [980, 1135, 1032, 1010, 982, 892, 958, 1028,
                                                     974, 1009])


def test_random_crop_is_a_shift_within_padding():
    rng = np.random.RandomState(0)
    images = rng.randint(1, 256, (50, 28, 28)).astype(np.uint8)  # no zeros inside
    crops = D.random_crop(np.random.RandomState(1), images)
    dy, dx = np.random.RandomState(1).randint(0, 9, size=(2, 50))
    padded = np.pad(images, ((0, 0), (4, 4), (4, 4)))
    for i in range(50):
        np.testing.assert_array_equal(crops[i], padded[i, dy[i]:dy[i] + 28, dx[i]:dx[i] + 28])
    assert crops.shape == images.shape and crops.dtype == np.uint8
    assert set(dy) == set(range(9))  # every shift from -4 to 4 occurs
    x = D.to_float(images[:2])
    assert x.shape == (2, 28, 28, 1) and x.max() <= 1.0


# ---------------------------------------------------------------------------------------------
# Models


@pytest.fixture(scope="module")
def batch():
    rng = np.random.RandomState(3)
    if have_mnist():
        images, labels = D.load()["test"]
        return D.to_float(images[:16]), labels[:16]
    return rng.rand(16, 28, 28, 1), rng.randint(0, 10, 16)


@pytest.mark.parametrize("name, count", [("mlp", 238_510), ("resnet", 576_778),
                                         ("rknet", 208_266), ("odenet", 208_266)])
def test_shapes_and_parameter_counts(name, count, batch):
    model = M.make_model(name)
    params = model.init(np.random.RandomState(0))
    assert M.n_params(params) == count  # Table 1: 0.24 M, 0.60 M, 0.22 M, 0.22 M
    assert model.logits(params, batch[0][:4]).shape == (4, 10)
    if name == "resnet":
        assert len(params["blocks"]) == 6


@pytest.mark.parametrize("name", M.NAMES)
def test_one_training_step_reduces_the_loss(name, batch):
    x, y = batch
    model = M.make_model(name)
    params = model.init(np.random.RandomState(1))
    loss = lambda p: M.cross_entropy(model.logits(p, x), y)  # noqa: E731
    before, grads = value_and_grad(loss)(params)
    after = loss(SGD(0.05).step(params, grads))
    assert after < before - 1e-3, (before, after)


@pytest.mark.parametrize("name", ["mlp", "resnet"])
def test_gradient_matches_finite_differences(name, batch):
    """float64 TensorFlow: the whole network's gradient (downsampling, blocks, head) against a
    central difference along a random direction."""
    x, y = batch[0][:3], batch[1][:3]
    model = M.make_model(name, dtype="float64", jit=False)
    params = model.init(np.random.RandomState(2))
    flat, unflatten = flatten(params)
    loss = lambda v: float(M.cross_entropy(model.logits(unflatten(v), x), y))  # noqa: E731
    g, _ = flatten(grad(lambda p: M.cross_entropy(model.logits(p, x), y))(params))
    direction = np.random.RandomState(3).randn(flat.size)
    eps = 1e-8  # small: with ~10^5 ReLUs, some lie within 1e-7 of their kink (measured)
    fd = (loss(flat + eps * direction) - loss(flat - eps * direction)) / (2 * eps)
    assert abs(fd - g @ direction) <= 1e-6 * abs(fd) + 1e-9


def smooth_dynamics(y, t, g1, b1, w1, c1, g2, b2, w2, c2, g3, b3):
    """The ODE-Net's dynamics with softplus for ReLU: the same convolutions and GroupNorms, but
    smooth, so that both solvers converge at their full order."""
    import tensorflow as tf
    from gpu_dynamics import layers
    h = layers.concat_conv2d(tf.nn.softplus(layers.group_norm(y, g1, b1)), t, w1, c1)
    h = layers.concat_conv2d(tf.nn.softplus(layers.group_norm(h, g2, b2)), t, w2, c2)
    return layers.group_norm(h, g3, b3)


def _loss_and_grad(model, params, x, y):
    loss, g = value_and_grad(lambda p: M.cross_entropy(model.logits(p, x), y))(params)
    return loss, flatten(g)[0]


@pytest.mark.parametrize("smooth", [True, False])
def test_odenet_adjoint_gradient_matches_direct_rk_backprop(batch, smooth):
    """ODE-Net (adams, adjoint) and RK-Net (dopri5, backprop through every stage) compute the
    same network; in float64 at tight tolerances their gradients agree (downsampling, dynamics
    and head together). With smooth dynamics to 1e-5. With the ReLU dynamics the solvers
    converge only at first order in the step where trajectories cross ReLU kinks (measured on
    two images: RK4 with 100, 400, 1600 steps differ by 3.1e-3 and 7.7e-4; adams at 1e-8 is
    2.4e-4 from RK4-1600), so there the bound is 2e-2."""
    import tensorflow as tf
    from gpu_dynamics import tf_primitive
    x, y = batch[0][:1], batch[1][:1]
    tol = 1e-8 if smooth else 1e-6
    options = dict(dtype="float64", jit=False, rtol=tol, atol=tol)
    if smooth:
        options["dynamics"] = tf_primitive(smooth_dynamics, dtype=tf.float64)
    ode, rk = M.make_model("odenet", **options), M.make_model("rknet", **options)
    params = ode.init(np.random.RandomState(4))
    l_ode, g_ode = _loss_and_grad(ode, params, x, y)
    l_rk, g_rk = _loss_and_grad(rk, params, x, y)
    assert ode.stats.backward.nfe > 0 and rk.stats.backward.nfe == 0  # adjoint vs direct
    assert abs(l_ode - l_rk) < 10 * tol
    assert np.linalg.norm(g_ode - g_rk) < (1e-5 if smooth else 2e-2) * np.linalg.norm(g_rk)
    sizes = [M.n_params(params[k]) for k in ("down", "dynamics", "head")]
    for part in np.split(g_ode, np.cumsum(sizes)[:-1]):  # every part gets a gradient
        assert np.linalg.norm(part) > 0


def test_rknet_with_rk4_needs_its_step_size():
    # rk4 controls no error: without step_size it would take one step over [0, 1]
    with pytest.raises(ValueError, match="step_size"):
        M.make_model("rknet", method="rk4")
    assert M.make_model("rknet", method="rk4", step_size=0.25).solver == dict(method="rk4",
                                                                            step_size=0.25)


def test_xla_dynamics_match_the_plain_tensorflow_ones(batch):
    """Training compiles the ODE dynamics with XLA; it must compute the same function."""
    from gpu_dynamics import layers
    rng = np.random.RandomState(7)
    y, g = rng.randn(4, 6, 6, 64), rng.randn(4, 6, 6, 64)
    params = layers.init_ode_dynamics(rng)
    xla, plain = M.tf_blocks("float32", True)["dynamics"], M.tf_blocks("float32", False)["dynamics"]
    assert xla.jit_compile and not plain.jit_compile
    np.testing.assert_allclose(xla(y, 0.3, *params), plain(y, 0.3, *params), rtol=1e-4,
                               atol=1e-5)
    for a, b in zip(xla.value_and_vjp(g, y, 0.3, *params)[3],
                    plain.value_and_vjp(g, y, 0.3, *params)[3]):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


def test_learning_rate_schedule():
    assert learning_rate(0) == pytest.approx(0.1)
    assert learning_rate(59) == pytest.approx(0.1)
    assert learning_rate(60) == pytest.approx(0.01)
    assert learning_rate(100) == pytest.approx(0.001)
    assert learning_rate(159) == pytest.approx(1e-4)
    assert learning_rate(0, batch_size=32) == pytest.approx(0.025)
    # a budget of E epochs drops at the same fractions of training: 16 -> 6, 10, 14
    lrs = [learning_rate(e, 16) for e in range(16)]
    np.testing.assert_allclose(lrs, [0.1] * 6 + [0.01] * 4 + [0.001] * 4 + [1e-4] * 2)
    # and 10 epochs -> 3.75, 6.25, 8.75: epochs 4, 7 and 9
    np.testing.assert_allclose([learning_rate(e, 10) for e in range(10)],
                               [0.1] * 4 + [0.01] * 3 + [0.001] * 2 + [1e-4])


def test_evaluate_pads_the_last_batch_and_ignores_the_padding():
    model = M.make_model("mlp")
    params = model.init(np.random.RandomState(5))
    rng = np.random.RandomState(6)
    images, labels = rng.randint(0, 256, (10, 28, 28)).astype(np.uint8), rng.randint(0, 10, 10)
    logits = model.logits(params, D.to_float(images))
    out = evaluate(model, params, images, labels, batch_size=4)
    assert out["test_error_pct"] == pytest.approx(100 * np.mean(logits.argmax(1) != labels))
    assert out["test_loss"] == pytest.approx(float(M.cross_entropy(logits, labels)))


# ---------------------------------------------------------------------------------------------
# Runs


def _argv(tmp_path, *extra):
    return ["--smoke", "--out", str(tmp_path / "out"), "--checkpoint-dir",
            str(tmp_path / "ckpt"), *extra]


def _state(tmp_path, name):
    from reproduce.common import AppendLog, Checkpoint
    state = Checkpoint(str(tmp_path / "ckpt" / f"{name}.ckpt")).load(force=True)
    state["batches"] = AppendLog(str(tmp_path / "ckpt" / f"{name}.log.jsonl")).read(
        state["log_size"])
    return state


@needs_mnist
@pytest.mark.parametrize("name", ["mlp", "odenet"])
def test_resume_after_a_kill_gives_the_uninterrupted_run(tmp_path, name):
    """Two epochs of two batches; killed after the third batch (mid-epoch, after its
    checkpoint), resumed: the same parameters, optimiser state and history as without the kill."""
    args = ["--models", name, "--epochs", "2", "--no-memory", "--no-figure3"]
    assert mnist.main(_argv(tmp_path / "whole", *args)) == 0
    with pytest.raises(KeyboardInterrupt):
        mnist.main(_argv(tmp_path / "killed", *args, "--stop-after", "3"))
    assert _state(tmp_path / "killed", name)["batch"] == 1  # stopped inside epoch 2
    assert mnist.main(_argv(tmp_path / "killed", *args, "--resume")) == 0
    whole, resumed = _state(tmp_path / "whole", name), _state(tmp_path / "killed", name)
    np.testing.assert_array_equal(flatten(whole["params"])[0], flatten(resumed["params"])[0])
    np.testing.assert_array_equal(whole["opt"]["velocity"], resumed["opt"]["velocity"])
    assert [b["loss"] for b in whole["batches"]] == [b["loss"] for b in resumed["batches"]]
    for a, b in zip(whole["history"], resumed["history"]):
        assert a["test_error_pct"] == b["test_error_pct"] and a["train_loss"] == b["train_loss"]
    assert resumed["epoch"] == 2 and len(resumed["batches"]) == 4
    # a resume with other settings is refused, naming the file and what differs
    from reproduce.common import CheckpointError
    with pytest.raises(CheckpointError, match=r"killed/ckpt/.*seed: 0 there, 1 here"):
        mnist.main(_argv(tmp_path / "killed", *args, "--resume", "--seed", "1",
                         "--epochs", "1"))
    # each record is dated by when its model's training finished, which a resume of a finished
    # checkpoint keeps (it is not trained again)
    from reproduce.common import Checkpoint
    when = "2000-01-01T00:00:00+00:00"

    def redate(path, trained):
        state = Checkpoint(str(path)).load(force=True)
        Checkpoint(str(path)).save({**state, "trained": trained})

    def summary(folder):
        return json.loads((tmp_path / folder / "out" / f"train_{name}.json").read_text())

    assert summary("whole")["date"] <= summary("whole")["trained"]
    redate(tmp_path / "whole" / "ckpt" / f"{name}.ckpt", when)
    assert mnist.main(_argv(tmp_path / "whole", *args, "--resume")) == 0
    assert summary("whole")["trained"] == when
    assert Checkpoint(str(tmp_path / "whole" / "ckpt" / "final" / f"{name}.ckpt")).load(
        force=True)["trained"] == when
    # the finished model's final weights alone give the table back, dated by them (weights
    # saved before dates were kept: None, the report says 'before' the evaluation)
    import shutil
    for f in (tmp_path / "killed" / "ckpt").glob(f"{name}.*"):
        f.unlink()
    shutil.rmtree(tmp_path / "killed" / "out")
    final = tmp_path / "killed" / "ckpt" / "final" / f"{name}.ckpt"
    for trained in (when, None):
        redate(final, trained)
        assert mnist.main(_argv(tmp_path / "killed", "--models", name, "--evaluate-only",
                                "--no-memory", "--no-figure3")) == 0
        evaluated = summary("killed")
        assert evaluated["epochs_run"] == evaluated["epochs_planned"] == 2
        assert evaluated["test_error_pct"] == whole["history"][-1]["test_error_pct"]
        assert evaluated["trained"] == trained and evaluated["command"] != evaluated["evaluated_by"]
    # a resumed run takes the final weights as a finished model: nothing is trained again
    assert mnist.main(_argv(tmp_path / "killed", *args, "--resume")) == 0
    assert not (tmp_path / "killed" / "ckpt" / f"{name}.ckpt").exists()


@needs_mnist
def test_smoke_run_writes_results_and_measures_memory(tmp_path):
    assert mnist.main(_argv(tmp_path)) == 0
    out = tmp_path / "out"
    for name in ("results.json", "table1.md", "figure3.png", "memory.png"):
        assert (out / name).exists(), name
    record = json.loads((out / "results.json").read_text())
    assert record["mode"] == "smoke" and record["choices"]["rk_net"]
    table = record["results"]["table1"]
    assert set(table) == set(M.NAMES)
    assert table["odenet"]["n_params"] == 208_266 and table["odenet"]["epochs_run"] == 1
    assert table["odenet"]["mean_nfe_backward"] > 0 and table["resnet"]["mean_nfe_forward"] == 6
    rows = record["results"]["memory"]["rows"]

    def peak(**match):
        return next(r["peak_mb"] for r in rows if all(r.get(k) == v for k, v in match.items()))

    # O(L) vs O(1): each residual block and each recorded RK stage adds memory; the adjoint's
    # does not grow with the integration time (and NFE)
    assert peak(model="resnet", n_blocks=6) > peak(model="resnet", n_blocks=2) + 2.0
    assert peak(model="rknet", steps=4) > peak(model="rknet", steps=1) + 2.0
    ode = [r for r in rows if r["model"] == "odenet"]
    assert ode[1]["nfe_forward"] > ode[0]["nfe_forward"]
    assert abs(ode[1]["peak_mb"] - ode[0]["peak_mb"]) < 1.0
    assert len(record["results"]["figure3"]["rows"]) == 2


def test_bad_arguments_and_missing_data(tmp_path, capsys):
    for bad, message in ((("--models", "odenet,vgg"), "unknown"), (("--epochs", "0"), "positive"),
                         (("--epochs", "x"), "not an integer"),
                         (("--checkpoint-every", "-1"), "positive"),
                         (("--bogus",), "unrecognized")):
        with pytest.raises(SystemExit) as exit_:
            mnist.main(_argv(tmp_path, *bad))
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
    assert mnist.main(_argv(tmp_path, "--data-dir", str(tmp_path))) == 2
    assert "train-images-idx3-ubyte.gz is missing" in capsys.readouterr().err


def test_report_convergence_bullet_shows_the_curve_and_the_last_epochs_range():
    from reproduce.mnist.report import convergence
    budget = [{"test_error_pct": e} for e in (3.0, 1.0, 0.7, 0.52, 0.5)]
    full = [{"test_error_pct": 2.0}] * 120 + [{"test_error_pct": 1.4 + 0.01 * i} for i in range(40)]
    text = convergence({"resnet": {"history": budget, "epochs_planned": 5},
                        "mlp": {"history": full, "epochs_planned": 160},
                        "rknet": {"history": budget[:2], "epochs_planned": 160}})
    assert "ResNet: 3.00, 1.00, 0.70, 0.52, 0.50 (last 3 epochs 0.50-0.70)" in text
    assert "1-layer MLP (last 40 epochs 1.40-1.79)" in text  # 160 epochs: no curve, a quarter
    assert "RK-Net (last 2 epochs 1.00-3.00)" in text  # a full run cut short: no curve either
    assert "ODE-Net" not in text  # a model without a run is left out
    assert convergence({"odenet": {"history": []}}) is None


def test_report_dates_a_training_run_by_its_weights_or_bounds_it():
    """The durations row of a model evaluated from its weights shows when training finished; weights
    that carry no date give only 'before' the date of the evaluation that scored them."""
    from reproduce.mnist.report import durations
    m = {"measured_epoch_seconds": 60.0, "epochs_run": 2, "train_seconds": 120.0,
         "command": "python -m reproduce mnist --full --only mlp", "date": "2026-12-07T03:22:28"}
    record = {"results": {"table1": {"mlp": {**m, "trained": "2026-12-01T06:40:00"},
                                      "resnet": m}}}
    rows = {r[2].split(",")[0]: r[3] for r in durations({"full": record})}
    assert rows == {"1-layer MLP": "2026-12-01", "ResNet": "before 2026-12-07"}


def test_a_download_that_fails_exits_1_to_be_retried_a_folder_it_cannot_make_2(tmp_path,
                                                                             monkeypatch, capsys):
    """A failed download may be the network's passing fault: the executor retries exit 1, not a
    command refused as given (exit 2)."""
    import functools
    monkeypatch.setattr(D, "download", functools.partial(
        D.download, mirrors=((tmp_path / "offline").as_uri() + "/",), timeout=1))
    argv = ["--smoke", "--download", "--out", str(tmp_path / "out"), "--checkpoint-dir",
            str(tmp_path / "ckpt")]
    assert mnist.main([*argv, "--data-dir", str(tmp_path / "data")]) == 1
    assert "could not download MNIST file" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert mnist.main([*argv, "--data-dir", str(tmp_path / "file" / "data")]) == 2
    assert "cannot make the MNIST folder" in capsys.readouterr().err
