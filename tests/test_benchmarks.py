"""The spiral benchmark runs end to end and counts what it says (one repeat; times unchecked)."""
import importlib.util
import json
import os

import numpy as np

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
