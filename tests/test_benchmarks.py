"""The benchmarks run end to end and count what they say (one repeat; times unchecked)."""
import importlib.util
import json
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks",
                                                                     name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spiral_demo_counts_and_errors(tmp_path):
    out = tmp_path / "spiral.json"
    load("spiral_demo").main(["--repeats", "1", "--out", str(out)])
    data = json.loads(out.read_text())
    rows = {(r["solver"], r["tol"]): r for r in data["rows"]}
    for tol in (1e-7, 1e-5):
        ours, theirs = rows[("odeint_autograd lsoda", tol)], rows[
            ("autograd.scipy.integrate.odeint", tol)]
        # the same LSODA forward solve, and gradients that agree to the tolerance
        assert ours["nfe_forward"] == theirs["nfe_forward"] > 0
        assert abs(ours["grad_rel_error"] - theirs["grad_rel_error"]) < 10 * tol
        # about one step per output interval: after each jump rkf23's costs 3 evaluations,
        # bosh3's 4 and dopri5's 7
        nfe = {m: rows[(f"odeint_autograd lsoda, {m} adjoint", tol)]["nfe_backward"]
               for m in ("rkf23", "bosh3", "dopri5")}
        assert nfe["rkf23"] <= 3 * 9 + 6 < nfe["bosh3"] <= 4 * 9 + 6 < nfe["dopri5"]
        for r in data["rows"]:
            if r["tol"] == tol:
                assert r["grad_rel_error"] < 1e3 * tol
    assert data["reference_check"] < 1e-9
    assert np.isfinite(data["evaluation"]["autograd_value_and_vjp_s"])
    # tracing the dynamics and running their VJP costs more than the dynamics alone
    assert data["evaluation"]["autograd_value_and_vjp_s"] > data["evaluation"]["numpy_forward_s"]


def test_tf_overhead_splits_the_time(tmp_path):
    """tf_overhead on a tiny block: TensorFlow and scipy each take a part of each phase's wall
    time, one TensorFlow call per evaluation, and --scipy-blas-unlimited leaves odeint as it
    found it."""
    pytest.importorskip("tensorflow")
    from odeint_autograd import _scipy
    limit = _scipy._scipy_blas_single_threaded
    module = load("tf_overhead")
    for flags in (["--scipy-blas-unlimited"], []):
        out = tmp_path / "tf.json"
        module.main(["--batch", "2", "--channels", "4", "--size", "4", "--repeats", "1",
                     "--out", str(out)] + flags)
        data = json.loads(out.read_text())
        assert data["settings"]["scipy_blas_limited_to_one_thread"] == (not flags)
        for name in ("forward", "backward"):
            p = data[name]
            assert p["nfe"] > 0 and p["steps"] > 0 and p["tf_calls"] == p["nfe"]
            assert 0 < p["tf_s"] < p["wall_s"] and 0 < p["scipy_s"] < p["wall_s"]
            assert p["tf_s"] + p["scipy_s"] < p["wall_s"]  # autograd's and odeint's Python
        for alone in data["scipy_alone"].values():
            assert alone["steps"] > 0 and 0 < alone["scipy_ms_per_step"] < alone[
                "wall_ms_per_step"]
        assert data["backward_evaluation_over_its_tf_call"] > 1
        assert _scipy._scipy_blas_single_threaded is limit


def test_mnist_step_counts_and_matches_pytorch(tmp_path):
    """mnist_step on 8 real images: the TensorFlow calls per step (one value and one VJP call
    per primitive, and one per dynamics evaluation), and, with the bench extra, PyTorch's
    networks from the same parameters give the same first loss."""
    pytest.importorskip("tensorflow")
    from reproduce.mnist import data as D
    try:
        D.check(D.data_dir())
    except D.MNISTDataError:
        pytest.skip("MNIST files not found")
    out = tmp_path / "step.json"
    load("mnist_step").main(["--batch", "8", "--warmup", "1", "--steps", "1", "--out", str(out)])
    rows = json.loads(out.read_text())["models"]
    for row in rows.values():
        assert row["ours"]["step_s"] > 0
    (resnet,), (odenet,), (rknet,) = (rows[m]["ours"]["steps"] for m in ("resnet", "odenet",
                                                                            "rknet"))
    assert resnet["tf_calls"] == 2 * (6 + 2)  # downsampling, 6 blocks, head
    assert resnet["tf_by_primitive"]["block"][:2] == [6, 6]
    assert odenet["nfe_forward"] > 0 and odenet["nfe_backward"] > 0
    assert odenet["tf_calls"] == 4 + odenet["nfe_forward"] + odenet["nfe_backward"]
    assert rknet["tf_by_primitive"]["dynamics"][:2] == [rknet["nfe_forward"],
                                                        rknet["nfe_backward"]]
    if "pytorch" not in rows["resnet"]:
        return
    for name, tol in (("mlp", 1e-6), ("resnet", 1e-6), ("rknet", 1e-3), ("odenet", 1e-3)):
        ours, theirs = rows[name]["ours"]["first_loss"], rows[name]["pytorch"]["first_loss"]
        assert abs(ours - theirs) < tol * abs(theirs), name
        assert rows[name]["ratio"] > 0


def test_threads_checks_every_answer(tmp_path):
    """odeint and scipy's ode on two threads, swapping often: no answer of either is wrong."""
    out = tmp_path / "threads.json"
    status = load("threads").main(["--seconds", "1", "--methods", "lsoda", "adams",
                                   "--out", str(out)])
    data = json.loads(out.read_text())
    assert status == 0 and data["wrong_or_failed"] == 0
    for row in data["rows"]:
        assert row["odeint_outcomes"].get("right", 0) > 0 < row["scipy_outcomes"].get("right", 0)
        assert set(row["odeint_outcomes"]) <= {"right"}, row  # odeint holds the lock throughout
        assert set(row["scipy_outcomes"]) <= {"right", "IntegratorConcurrencyError"}, row


@pytest.mark.skipif(not hasattr(__import__("signal"), "setitimer")
                    or not os.path.exists("/proc/self/fd"), reason="POSIX timers, Linux's /proc")
def test_interrupts_leave_nothing_held(tmp_path):
    """Solves interrupted at random moments by a timer signal leave no lock held."""
    out = tmp_path / "interrupts.json"
    status = load("interrupts").main(["--seconds", "2", "--out", str(out)])
    data = json.loads(out.read_text())
    assert status == 0 and data["left_held"] == 0 and data["first_left_held"] is None
    assert sum(row["interrupted"] for row in data["solves"].values()) > 10
