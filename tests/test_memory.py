"""The adjoint's memory does not grow with the number of solver steps; direct backprop's does.
tracemalloc counts numpy's allocations exactly, so this is not a timing test."""
import tracemalloc

import autograd.numpy as anp
import numpy as np
from autograd import grad

from odeint_autograd import SolverStats, odeint


def peak_mb(method, T, **options):
    rs = np.random.RandomState(0)
    params = [rs.randn(32, 32) / 6, rs.randn(32, 32) / 6]
    y0 = rs.randn(64, 32)
    stats = SolverStats()
    loss = lambda p: anp.sum(odeint(lambda y, t, W1, W2: anp.dot(anp.tanh(anp.dot(y, W1)), W2),
                                    y0, np.array([0.0, T]), tuple(p), method=method,
                                    stats=stats, **options)[-1] ** 2)
    tracemalloc.start()
    grad(loss)(params)
    peak = tracemalloc.get_traced_memory()[1] / 2 ** 20
    tracemalloc.stop()
    return peak, stats.forward.steps


def test_adjoint_memory_is_flat_in_steps_while_direct_backprop_grows():
    adj_short, steps_short = peak_mb("adams", 1.0, rtol=1e-6, atol=1e-6)
    adj_long, steps_long = peak_mb("adams", 8.0, rtol=1e-6, atol=1e-6)
    assert steps_long > 2.5 * steps_short
    assert adj_long < 1.2 * adj_short
    rk_short, _ = peak_mb("rk4", 1.0, step_size=0.1)
    rk_long, _ = peak_mb("rk4", 8.0, step_size=0.1)
    assert rk_long > 5 * rk_short
