"""odeint_autograd: values and gradients against closed forms, finite differences and direct
backprop; higher derivatives; options; NFE counts."""
import collections
import threading

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad, hessian, jacobian, make_hvp
from scipy.linalg import expm

from odeint_autograd import ADJOINT_METHODS, Counts, ODESolverError, SolverStats, adjoint, odeint

TOL = dict(rtol=1e-10, atol=1e-10)
A = np.array([[-0.1, 2.0], [-2.0, -0.1]])
Y0 = np.array([2.0, 0.0])


def linear(y, t, A):
    return anp.dot(A, y)


def linear_exact(y0, t, A=A):
    """y(t_i) = expm(A (t_i - t_0)) y0 for A = -0.1 I + 2 [[0, 1], [-1, 0]], in autograd
    operations so that it gives reference gradients with respect to y0 and t."""
    rows = []
    for ti in t:
        s = ti - t[0]
        c, sn = anp.cos(2 * s), anp.sin(2 * s)
        rows.append(anp.exp(-0.1 * s) * anp.stack([c * y0[0] + sn * y0[1],
                                                   -sn * y0[0] + c * y0[1]]))
    return anp.stack(rows)


def central_difference(fun, x, eps=1e-6):
    x = np.asarray(x, dtype=float)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (fun(x + e) - fun(x - e)) / (2 * eps)
    return g


def weighted_sum(ys):
    """A loss that weights every output time and component differently."""
    w = np.arange(1, ys.size + 1, dtype=float).reshape(ys.shape) / ys.size
    return anp.sum(w * anp.sin(ys))


@pytest.mark.parametrize("method, adjoint_method", [("lsoda", None), ("adams", None),
                                                    ("bdf", None), ("dopri5", None),
                                                    ("bosh3", None), ("rkf23", None),
                                                    ("adams", "dopri5"), ("lsoda", "bosh3"),
                                                    ("lsoda", "rkf23"), ("lsoda", "bdf")])
@pytest.mark.parametrize("direction", [1, -1])
def test_linear_ode_values_and_gradients_against_expm(method, adjoint_method, direction):
    t = direction * np.array([0.0, 0.3, 0.7, 1.5, 2.0]) + 0.5
    options = dict(TOL, adjoint_method=adjoint_method) if adjoint_method else TOL
    ys = odeint(linear, Y0, t, (A,), method=method, **options)
    assert ys.shape == (5, 2)
    assert np.array_equal(ys[0], Y0)
    exact = np.array([expm(A * (ti - t[0])) @ Y0 for ti in t])
    np.testing.assert_allclose(ys, exact, atol=1e-7)

    loss = lambda y0, t, A: weighted_sum(odeint(linear, y0, t, (A,), method=method, **options))
    ref = lambda y0, t: weighted_sum(linear_exact(y0, t, A))
    np.testing.assert_allclose(grad(loss, 0)(Y0, t, A), grad(ref, 0)(Y0, t), atol=1e-6)
    np.testing.assert_allclose(grad(loss, 1)(Y0, t, A), grad(ref, 1)(Y0, t), atol=1e-6)
    exact_A = lambda M: weighted_sum(np.array([expm(M * (ti - t[0])) @ Y0 for ti in t]))
    np.testing.assert_allclose(grad(loss, 2)(Y0, t, A), central_difference(exact_A, A),
                               atol=1e-6)


def test_linear_ode_jacobian_of_all_outputs_wrt_y0_is_the_matrix_exponential():
    t = np.linspace(0, 1.3, 4)
    J = jacobian(lambda y0: odeint(linear, y0, t, (A,), **TOL))(Y0)
    assert J.shape == (4, 2, 2)
    for i, ti in enumerate(t):
        np.testing.assert_allclose(J[i], expm(A * ti), atol=1e-7)


def logistic_exact(y0, t, r, K):
    e = anp.exp(r * (t - t[0]))
    return K * y0 * e / (K + y0 * (e - 1))


@pytest.mark.parametrize("method", ADJOINT_METHODS)
def test_logistic_growth_gradients_against_closed_form(method):
    f = lambda y, t, r, K: r * y * (1 - y / K)
    t = np.array([0.0, 0.5, 1.0, 3.0])
    args = (0.1, 0.8, 2.0)  # y0, r, K (scalar state)
    loss = lambda y0, t, r, K: anp.sum(odeint(f, y0, t, (r, K), method=method, **TOL) ** 2)
    exact = lambda y0, t, r, K: anp.sum(logistic_exact(y0, t, r, K) ** 2)
    for argnum in range(4):
        inputs = (args[0], t) + args[1:]
        np.testing.assert_allclose(grad(loss, argnum)(*inputs), grad(exact, argnum)(*inputs),
                                   rtol=1e-6, atol=1e-8)


def test_time_dependent_dynamics_gradient_wrt_every_time():
    """y' = a sin(t) y has y(t) = y0 exp(a (cos t0 - cos t)); t enters f explicitly."""
    f = lambda y, t, a: a * anp.sin(t) * y
    exact = lambda y0, t, a: anp.stack([y0 * anp.exp(a * (anp.cos(t[0]) - anp.cos(ti)))
                                        for ti in t])
    t = np.array([0.2, 0.9, 1.4, 2.5])
    y0, a = np.array([1.0, -0.5]), 0.7
    loss = lambda y0, t, a: weighted_sum(odeint(f, y0, t, (a,), **TOL))
    ref = lambda y0, t, a: weighted_sum(exact(y0, t, a))
    for argnum in range(3):
        np.testing.assert_allclose(grad(loss, argnum)(y0, t, a), grad(ref, argnum)(y0, t, a),
                                   rtol=1e-6, atol=1e-8)


def mlp(y, t, W1, b1, W2):
    return anp.dot(anp.tanh(anp.dot(y, W1) + b1 + t), W2)


def mlp_params(seed=0, hidden=8):
    rs = np.random.RandomState(seed)
    return [rs.randn(3, hidden) * 0.5, rs.randn(hidden) * 0.1, rs.randn(hidden, 3) * 0.5]


@pytest.mark.parametrize("method", ["lsoda", "adams"])
def test_mlp_dynamics_gradients_against_finite_differences(method):
    params = mlp_params()
    y0 = np.random.RandomState(1).randn(4, 3)  # a batch: matrix-shaped state
    t = np.array([0.0, 0.4, 1.0])

    def loss(y0, W1, b1, W2):
        return weighted_sum(odeint(mlp, y0, t, (W1, b1, W2), method=method, **TOL))

    for argnum in range(4):
        inputs = [y0] + params
        g = grad(loss, argnum)(*inputs)

        def shifted(x, argnum=argnum):
            return loss(*[x if k == argnum else v for k, v in enumerate(inputs)])

        np.testing.assert_allclose(g, central_difference(shifted, inputs[argnum]),
                                   rtol=1e-5, atol=1e-7)


def test_adjoint_matches_direct_backprop_through_small_rk4_steps():
    params = mlp_params(2)
    y0 = np.random.RandomState(3).randn(5, 3)
    t = np.array([0.0, 0.25, 0.8])

    def loss(params, y0, t, **kw):
        return weighted_sum(odeint(mlp, y0, t, tuple(params), **kw))

    adjoint = grad(loss, (0, 1, 2))(params, y0, t, method="lsoda", **TOL)
    direct = grad(loss, (0, 1, 2))(params, y0, t, method="rk4", step_size=1e-3)
    for a, d in zip(adjoint[0] + [adjoint[1], adjoint[2]], direct[0] + [direct[1], direct[2]]):
        np.testing.assert_allclose(a, d, rtol=1e-7, atol=1e-9)


def test_hessian_through_odeint_matches_closed_form():
    t = np.linspace(0.0, 1.0, 3)
    loss = lambda y0: anp.sum(anp.sin(odeint(linear, y0, t, (A,), **TOL)))
    ref = lambda y0: anp.sum(anp.sin(linear_exact(y0, t, A)))
    np.testing.assert_allclose(hessian(loss)(Y0), hessian(ref)(Y0), atol=1e-6)


def test_second_derivatives_wrt_parameters_and_times():
    f = lambda y, t, a: a * anp.sin(t) * y
    exact = lambda y0, t, a: anp.stack([y0 * anp.exp(a * (anp.cos(t[0]) - anp.cos(ti)))
                                        for ti in t])
    y0, t, a = np.array([0.8]), np.array([0.1, 0.7, 1.2]), 0.6
    loss = lambda t, a: anp.sum(odeint(f, y0, t, (a,), **TOL) ** 2)
    ref = lambda t, a: anp.sum(exact(y0, t, a) ** 2)
    np.testing.assert_allclose(hessian(loss, 1)(t, a), hessian(ref, 1)(t, a), rtol=1e-5)
    np.testing.assert_allclose(jacobian(grad(loss, 1), 0)(t, a),
                               jacobian(grad(ref, 1), 0)(t, a), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(hessian(loss, 0)(t, a), hessian(ref, 0)(t, a), rtol=1e-5,
                               atol=1e-8)


def test_hessian_vector_product_of_mlp_loss_matches_finite_differences_of_gradients():
    params = mlp_params(4, hidden=4)
    y0 = np.random.RandomState(5).randn(2, 3)
    t = np.array([0.0, 0.5])
    loss = lambda W1: weighted_sum(odeint(mlp, y0, t, (W1, params[1], params[2]), **TOL))
    v = np.random.RandomState(6).randn(*params[0].shape)
    hvp = make_hvp(loss)(params[0])[0](v)
    eps = 1e-5
    fd = (grad(loss)(params[0] + eps * v) - grad(loss)(params[0] - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hvp, fd, rtol=1e-5, atol=1e-8)


def test_state_shapes_scalar_and_3d():
    ys = odeint(lambda y, t: -y, 2.0, [0.0, 1.0], **TOL)
    assert ys.shape == (2,)
    np.testing.assert_allclose(ys[1], 2 * np.exp(-1), rtol=1e-8)
    y0 = np.arange(24, dtype=float).reshape(2, 3, 4)
    ys = odeint(lambda y, t, k: -k * y, y0, np.linspace(0, 1, 3), (0.5,), **TOL)
    assert ys.shape == (3, 2, 3, 4)
    np.testing.assert_allclose(ys[-1], y0 * np.exp(-0.5), rtol=1e-8, atol=1e-12)
    g = grad(lambda k: anp.sum(odeint(lambda y, t, k: -k * y, y0, [0.0, 1.0], (k,),
                                      **TOL)[-1]))(0.5)
    np.testing.assert_allclose(g, -np.sum(y0) * np.exp(-0.5), rtol=1e-7)


def test_args_may_be_nested_containers_with_static_entries():
    def f(y, t, params, config):
        W, b = params["W"], params["b"]
        return config["sign"] * anp.tanh(anp.dot(W, y) + b[0])

    W = np.array([[0.3, -0.2], [0.1, 0.4]])
    b = [np.array([0.05, -0.1])]
    loss = lambda W, b: anp.sum(odeint(f, Y0, [0.0, 1.0], ({"W": W, "b": b}, {"sign": -1}),
                                       **TOL)[-1])
    gW, gb = grad(loss, (0, 1))(W, b)
    np.testing.assert_allclose(gW, central_difference(lambda x: loss(x, b), W), atol=1e-7)
    np.testing.assert_allclose(gb[0], central_difference(lambda x: loss(W, [x]), b[0]),
                               atol=1e-7)


def test_grad_with_params_given_as_a_list_through_autograd():
    """grad of a list of parameters: the list arrives boxed, and tuple(params) works as args."""
    params = mlp_params(7, hidden=3)
    y0 = np.ones((1, 3))
    loss = lambda p: anp.sum(odeint(mlp, y0, [0.0, 0.5], tuple(p), **TOL))
    g = grad(loss)(params)
    g_nested = grad(lambda p: anp.sum(odeint(lambda y, t, p: mlp(y, t, *p), y0, [0.0, 0.5],
                                             (p,), **TOL)))(params)
    for a, b in zip(g, g_nested):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    for a, b in zip(g, [central_difference(lambda x: loss([x] + params[1:]), params[0])]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8)


Decay = collections.namedtuple("Decay", ["k", "c"])


@pytest.mark.parametrize("method", ["lsoda", "adams", "bdf", "dopri5"])
def test_namedtuple_args_reach_func_as_namedtuples(method):
    """y' = -k y + c: y(1) = c / k + (y0 - c / k) e^-k, and its derivatives in k and c."""
    f = lambda y, t, p: -p.k * y + p.c  # noqa: E731
    exact = lambda k, c: c / k + (1.0 - c / k) * anp.exp(-k)  # noqa: E731
    loss = lambda k, c: odeint(f, np.array([1.0]), [0.0, 1.0], (Decay(k, c),), method=method,
                               **TOL)[-1, 0]  # noqa: E731
    np.testing.assert_allclose(loss(0.5, 0.1), exact(0.5, 0.1), rtol=1e-8)
    np.testing.assert_allclose(grad(loss, (0, 1))(0.5, 0.1), grad(exact, (0, 1))(0.5, 0.1),
                               rtol=1e-7)


@pytest.mark.parametrize("method", ADJOINT_METHODS)
def test_untraced_float_args_get_no_adjoint(method):
    """A constant float array in args (not differentiated) stays out of the augmented state:
    at 200,000 entries it would dilute the backward solve's error norm (the RMS over every
    component) until the gradient misses its tolerance by orders of magnitude."""
    def f(y, t, k, d):
        return anp.stack([y[1], -k * anp.sin(y[0])]) + 1e-3 * d[:2]

    data = np.random.RandomState(0).randn(200_000)
    t = np.linspace(0.0, 10.0, 11)
    loss = lambda k, d, **kw: anp.sum(odeint(f, np.array([1.0, 0.0]), t, (k, d), **kw) ** 2)
    reference = grad(loss)(1.5, data[:2], method="dopri5", rtol=1e-12, atol=1e-12)
    counts = []
    for d in (data, data[:2].copy()):
        stats = SolverStats()
        g = grad(loss)(1.5, d, method=method, rtol=1e-8, atol=1e-8, stats=stats)
        np.testing.assert_allclose(g, reference, rtol=1e-5)
        counts.append(stats.backward.nfe)
    assert counts[0] == counts[1]


def test_nfe_and_step_counts():
    calls = []

    def f(y, t, k):
        calls.append(t)
        return -k * y

    stats = SolverStats()
    loss = lambda k: anp.sum(odeint(f, Y0, [0.0, 0.5, 1.0], (k,), method="adams", stats=stats))
    loss(0.3)
    assert stats.forward.nfe == len(calls) > 0
    assert 0 < stats.forward.steps <= stats.forward.nfe
    assert stats.forward.solves == 1 and stats.backward.nfe == 0
    calls.clear()
    stats.reset()
    grad(loss)(0.3)
    assert stats.forward.nfe > 0 and stats.backward.solves == 2  # one per output interval
    assert 0 < stats.backward.steps <= stats.backward.nfe
    # the backward's evaluations trace f once each; dL/dt_i needs no f here (t not differentiated)
    assert len(calls) == stats.forward.nfe + stats.backward.nfe

    stats.reset()
    odeint(f, Y0, [0.0, 1.0, 2.0], (0.3,), method="rk4", step_size=0.1, stats=stats)
    assert stats.forward.steps == 20 and stats.forward.nfe == 4 * 20


def test_stats_accumulate_and_default_tolerances_are_scipys():
    from scipy.integrate import odeint as scipy_odeint
    f = lambda y, t: np.array([y[1], -np.sin(y[0])])
    t = np.linspace(0, 10, 11)
    # scipy's odeint (LSODA) told not to step past the last time, as odeint never does
    np.testing.assert_allclose(odeint(f, [1.0, 0.0], t),
                               scipy_odeint(f, [1.0, 0.0], t, tcrit=[t[-1]]), rtol=1e-12,
                               atol=1e-12)
    once, twice = SolverStats(), SolverStats()
    odeint(f, [1.0, 0.0], t, stats=once)
    for _ in range(2):
        odeint(f, [1.0, 0.0], t, stats=twice)
    assert once.forward.nfe > 0 and once.forward.solves == 1
    assert (twice.forward.nfe, twice.forward.steps, twice.forward.solves) == (
        2 * once.forward.nfe, 2 * once.forward.steps, 2)


def test_seminorm_keeps_mlp_gradients_accurate():
    params = mlp_params(8, hidden=64)
    y0 = np.random.RandomState(9).randn(3, 3)
    t = np.array([0.0, 2.0])
    reference = grad(lambda p: weighted_sum(odeint(mlp, y0, t, tuple(p), **TOL)))(params)
    for method in ("adams", "lsoda"):
        g = grad(lambda p: weighted_sum(odeint(mlp, y0, t, tuple(p), method=method, rtol=1e-6,
                                               atol=1e-6, adjoint_seminorm=True)))(params)
        for a, b in zip(g, reference):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * np.abs(b).max())


@pytest.mark.parametrize("method", ADJOINT_METHODS)
def test_seminorm_leaves_the_parameter_integrals_out_of_the_error_control(method):
    """y' = -y + sum_j theta_j sin(w_j t) with tiny theta: z and a are smooth, only the
    integrands of dL/dtheta oscillate. Without the seminorm the backward solve resolves the
    oscillations; with it, it steps as the smooth z and a allow (and dL/dy0 stays exact)."""
    w = np.array([40.0, 55.0, 70.0])
    f = lambda y, t, th: -y + anp.sum(th * anp.sin(w * t))
    y0, th = np.array([1.0]), np.full(3, 1e-6)
    nfe, dy0 = {}, {}
    for seminorm in (False, True):
        stats = SolverStats()
        loss = lambda y0, th: odeint(f, y0, [0.0, 2.0], (th,), method=method, rtol=1e-6,
                                     atol=1e-8, adjoint_seminorm=seminorm, stats=stats)[-1, 0]
        dy0[seminorm], _ = grad(loss, (0, 1))(y0, th)
        nfe[seminorm] = stats.backward.nfe
    assert nfe[True] < 0.3 * nfe[False]
    for g in dy0.values():
        np.testing.assert_allclose(g, np.exp(-2.0), rtol=5e-5)  # the solves use rtol 1e-6


@pytest.mark.parametrize("method", ["lsoda", "adams"])
def test_checkpoints_fix_a_backsolve_that_strays_which_raises(method):
    """z1 relaxes fast onto sin(theta t) (rate k = 8), z2 integrates z1, L = z2(T = 2). Solved
    backwards, z1's reconstruction error grows like e^{k (T - t)} (~1e7), which would spoil
    dL/dtheta through the cubic term: refused. Restarting z from stored forward states every
    0.1 fixes it."""
    f = lambda z, t, th, k: anp.stack([-k * (z[0] - anp.sin(th * t)) - z[0] ** 3, z[0]])
    z0, T = np.array([0.5, 0.0]), 2.0
    loss = lambda th, **kw: odeint(f, z0, [0.0, T], (th, 8.0), **kw)[-1, 1]
    exact = grad(loss)(2.0, method="dopri5", rtol=1e-12, atol=1e-12)  # direct backprop
    with pytest.raises(ODESolverError, match=r"adjoint.*error weights.*checkpoints=k"):
        grad(loss)(2.0, method=method, rtol=1e-8, atol=1e-8)
    # what the refused gradient would have been: measurably wrong
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(adjoint, "RECONSTRUCTION_LIMIT", np.inf)
        plain = grad(loss)(2.0, method=method, rtol=1e-8, atol=1e-8)
    assert abs(plain / exact - 1) > 3e-4
    checkpointed = grad(loss)(2.0, method=method, rtol=1e-8, atol=1e-8, checkpoints=19)
    assert abs(checkpointed / exact - 1) < 1e-5
    # with a stronger contraction the plain backsolve blows up; checkpointing still works
    with pytest.raises(ODESolverError):
        grad(lambda th: odeint(f, z0, [0.0, T], (th, 10.0), method=method)[-1, 1])(2.0)
    grad(lambda th: odeint(f, z0, [0.0, T], (th, 10.0), method=method, checkpoints=19)[-1, 1])(2.0)
    # the outputs themselves do not change
    t = np.array([0.0, 0.5, T])
    np.testing.assert_allclose(odeint(f, z0, t, (2.0, 8.0), checkpoints=5),
                               odeint(f, z0, t, (2.0, 8.0)), rtol=1e-6, atol=1e-9)


def test_the_reconstruction_check_passes_gradients_as_good_as_their_tolerances():
    """Where the state solved backwards strays only as far as the tolerances let it (a loose
    forward solve under a tight adjoint, a component at zero under a small atol, an orbit that
    gathers 2000 error weights of global error, Hessians whose seminorm leaves a_theta out of
    the error control), the gradient is given."""
    osc = lambda y, t, w: anp.stack([y[1], -w * y[0]])  # noqa: E731
    loss = lambda w, y0, t, **kw: anp.sum(odeint(osc, y0, t, (w,), **kw)[-1] ** 2)  # noqa
    exact = lambda y0, t: grad(loss)(1.3, y0, t, method="dopri5", rtol=1e-12, atol=1e-12)  # noqa
    y0, t = np.array([1.0, 0.0]), np.linspace(0.0, 5.0, 6)
    g = grad(loss)(1.3, y0, t, rtol=1e-3, atol=1e-3, adjoint_rtol=1e-10, adjoint_atol=1e-10)
    np.testing.assert_allclose(g, exact(y0, t), rtol=0.1)
    for method in ("lsoda", "adams"):
        g = grad(loss)(1.3, y0, t[:3], method=method, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(g, exact(y0, t[:3]), rtol=1e-4)
    kepler = lambda y, t, p: anp.concatenate(  # noqa: E731
        [y[2:], -p[0] * y[:2] / anp.sum(y[:2] ** 2) ** 1.5])
    orbit = lambda p, **kw: anp.sum(odeint(kepler, np.array([0.4, 0.0, 0.0, 2.0]), [0.0, 30.0],
                                           (p,), max_steps=10 ** 6, **kw)[-1] ** 2)  # noqa
    np.testing.assert_allclose(grad(orbit)(np.ones(1), method="adams", rtol=1e-9, atol=1e-9),
                               grad(orbit)(np.ones(1), method="dopri5", rtol=1e-12, atol=1e-12),
                               rtol=1e-5)
    th = np.array([[-0.3, 1.0], [-1.0, -0.2]])
    mlp = lambda th, **kw: anp.sum(odeint(lambda y, t, th: anp.tanh(anp.dot(th, y)),  # noqa
                                          np.array([0.5, -0.3]), [0.0, 1.0, 2.0], (th,),
                                          **kw)[-1] ** 2)
    reference = hessian(lambda th: mlp(th, method="dopri5", rtol=1e-12, atol=1e-12))(th)
    np.testing.assert_allclose(
        hessian(lambda th: mlp(th, rtol=1e-6, atol=1e-10, adjoint_seminorm=True))(th),
        reference, atol=1e-4 * np.max(np.abs(reference)))


def test_checkpoints_with_time_gradients_and_decreasing_times():
    f = lambda y, t, a: a * anp.sin(t) * y
    exact = lambda y0, t, a: anp.stack([y0 * anp.exp(a * (anp.cos(t[0]) - anp.cos(ti)))
                                        for ti in t])
    t, y0, a = np.array([2.0, 1.1, 0.3]), np.array([0.5]), 0.9
    loss = lambda t, a: weighted_sum(odeint(f, y0, t, (a,), checkpoints=[1.5, 0.7], **TOL))
    ref = lambda t, a: weighted_sum(exact(y0, t, a))
    for argnum in (0, 1):
        np.testing.assert_allclose(grad(loss, argnum)(t, a), grad(ref, argnum)(t, a),
                                   rtol=1e-6, atol=1e-9)


def test_separate_adjoint_options_are_used():
    stats_tight, stats_loose = SolverStats(), SolverStats()
    params = mlp_params(10)
    y0 = np.ones((2, 3))
    for stats, tol in ((stats_tight, 1e-10), (stats_loose, 1e-3)):
        grad(lambda p: anp.sum(odeint(mlp, y0, [0.0, 1.0], tuple(p), method="lsoda",
                                      adjoint_method="adams", adjoint_rtol=tol,
                                      adjoint_atol=tol, stats=stats)))(params)
    assert stats_tight.forward.nfe == stats_loose.forward.nfe
    assert stats_loose.backward.nfe < stats_tight.backward.nfe


def test_fused_value_and_vjp_is_used_and_gives_the_same_gradients():
    used = []

    def f(y, t, W):
        return anp.tanh(anp.dot(y, W))

    def value_and_vjp(g, y, t, W):
        used.append(1)
        h = np.tanh(y @ W)
        d = g * (1 - h ** 2)
        return h, d @ W.T, 0.0, (y.T @ d,)

    fused = lambda y, t, W: f(y, t, W)
    fused.value_and_vjp = value_and_vjp
    W = np.random.RandomState(11).randn(3, 3) * 0.5
    y0 = np.ones((2, 3))
    loss = lambda W, fn: weighted_sum(odeint(fn, y0, [0.0, 0.5, 1.0], (W,), **TOL))
    g_plain = grad(loss)(W, f)
    g_fused = grad(loss)(W, fused)
    assert used
    np.testing.assert_allclose(g_fused, g_plain, rtol=1e-9)

    # it gives every arg's VJP; the adjoint keeps those of the args being differentiated
    def value_and_vjp_2(g, y, t, W, c):
        h, g_y, g_t, (g_W,) = value_and_vjp(g, y, t, W)
        return h + c, g_y, g_t, (g_W, np.sum(g, axis=0))

    f2 = lambda y, t, W, c: f(y, t, W) + c  # noqa: E731
    fused2 = lambda y, t, W, c: f2(y, t, W, c)  # noqa: E731
    fused2.value_and_vjp = value_and_vjp_2
    c = np.array([0.1, -0.2, 0.3])
    loss2 = lambda W, c, fn: weighted_sum(odeint(fn, y0, [0.0, 0.5, 1.0], (W, c), **TOL))
    for argnum in (0, 1):
        np.testing.assert_allclose(grad(loss2, argnum)(W, c, fused2),
                                   grad(loss2, argnum)(W, c, f2), rtol=1e-9)
    for a, b in zip(grad(loss2, (0, 1))(W, c, fused2), grad(loss2, (0, 1))(W, c, f2)):
        np.testing.assert_allclose(a, b, rtol=1e-9)


def test_large_state_never_gets_a_dense_jacobian():
    """400,000 states with a stiff component: the default (lsoda) and bdf must use the
    diagonal Jacobian (a dense one would be 1.3 TB) and solve it."""
    n = 400_000
    rates = np.where(np.arange(n) % 2 == 0, 1.0, 1000.0)
    y0 = np.ones(n)
    for method in ("lsoda", "bdf"):
        ys = odeint(lambda y, t: -rates * y, y0, [0.0, 1.0], rtol=1e-6, atol=1e-9,
                    method=method)
        np.testing.assert_allclose(ys[-1], np.exp(-rates), rtol=1e-3, atol=1e-8)


def test_solves_in_threads_give_the_same_answers():
    out = {}

    def work(k):
        out[k] = odeint(lambda y, t: -k * y, Y0, np.linspace(0, 1, 50), **TOL)[-1]

    threads = [threading.Thread(target=work, args=(k,)) for k in (0.5, 1.0, 2.0, 3.0)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for k, y in out.items():
        np.testing.assert_allclose(y, Y0 * np.exp(-k), rtol=1e-7)


@pytest.mark.parametrize("rk_method, tol", [("dopri5", 1e-8), ("bosh3", 1e-6), ("rkf23", 1e-6)])
def test_runge_kutta_adjoint_carries_its_step_over_the_output_intervals(rk_method, tol):
    """With many output times the backward solve restarts often; the Runge-Kutta pairs keep
    their step size, so they need fewer evaluations than VODE's restarts from order 1, and give
    the same gradient (the order-3 pairs at a tolerance where their steps can still be long)."""
    params = mlp_params(12, hidden=16)
    y0 = np.random.RandomState(13).randn(6, 3)
    t = np.linspace(0.0, 2.0, 60)
    results = {}
    for adjoint_method in ("adams", rk_method):
        stats = SolverStats()
        g = grad(lambda p: weighted_sum(odeint(mlp, y0, t, tuple(p), method="adams",
                                               adjoint_method=adjoint_method, rtol=tol,
                                               atol=tol, stats=stats)))(params)
        results[adjoint_method] = g, stats.backward.nfe
    for a, b in zip(results["adams"][0], results[rk_method][0]):
        np.testing.assert_allclose(a, b, rtol=1e3 * tol, atol=1e2 * tol * np.abs(b).max())
    assert results[rk_method][1] < results["adams"][1]


def test_order_3_adjoints_take_fewer_evaluations_than_dopri5_on_short_intervals():
    """200 output times over [0, 2] at tol 1e-4: each backward interval is one step of any pair.
    After each restart bosh3's step costs 4 evaluations (a fresh first stage and 3 more), rkf23's
    3 (it has no first-same-as-last stage), dopri5's 7; the gradients agree with a tight one."""
    params = mlp_params(12, hidden=16)
    y0 = np.random.RandomState(13).randn(6, 3)
    t = np.linspace(0.0, 2.0, 200)
    nfe, grads = {}, {}
    for adjoint_method, tol in (("dopri5", 1e-4), ("bosh3", 1e-4), ("rkf23", 1e-4),
                                ("dopri5", 1e-10)):
        stats = SolverStats()
        grads[adjoint_method, tol] = grad(lambda p: weighted_sum(odeint(
            mlp, y0, t, tuple(p), method="adams", adjoint_method=adjoint_method, rtol=tol,
            atol=tol, stats=stats)))(params)
        nfe[adjoint_method, tol] = stats.backward.nfe, stats.backward.steps
    (n_rkf23, steps), (n_bosh3, _), (n_dopri5, _) = (nfe[m, 1e-4] for m in ("rkf23", "bosh3",
                                                                           "dopri5"))
    # about one step per interval; 3 stages a step, and one evaluation to pick the first step
    assert steps <= 201 and n_rkf23 == 3 * steps + 1
    assert n_rkf23 < 0.8 * n_bosh3 < 0.6 * n_dopri5
    for method in ("dopri5", "bosh3", "rkf23"):
        for a, b in zip(grads["dopri5", 1e-10], grads[method, 1e-4]):
            np.testing.assert_allclose(b, a, atol=1e-3 * np.abs(a).max())


def test_rkf23_is_more_cautious_than_bosh3():
    """Both propagate an order-3 solution; rkf23 estimates its error against Heun's method, bosh3
    against a better order-2 solution, so at one tolerance rkf23 takes more, shorter steps and
    ends more accurate: it pays only where the output times cut the steps short anyway."""
    t = np.linspace(0.0, 3.0, 4)
    exact = np.array([expm(A * ti) @ Y0 for ti in t])
    nfe, error = {}, {}
    for method in ("bosh3", "rkf23"):
        stats = SolverStats()
        ys = odeint(linear, Y0, t, (A,), method=method, rtol=1e-6, atol=1e-6, stats=stats)
        nfe[method], error[method] = stats.forward.nfe, np.abs(ys - exact).max()
    assert nfe["rkf23"] > 1.5 * nfe["bosh3"]
    assert error["rkf23"] < 0.5 * error["bosh3"]


@pytest.mark.parametrize("method, order", [("dopri5", 5), ("bosh3", 3), ("rkf23", 3)])
def test_runge_kutta_pairs_have_their_order(method, order):
    """One step of size h on y' = y has local error ~ h^(order+1): halving h divides it by
    2^(order+1). Loose tolerances accept every step, so each output interval is one step."""
    from odeint_autograd.rk import TABLEAUX, embedded_rk
    errors = []
    for h in (0.1, 0.05):
        counts = Counts()
        ys, _ = embedded_rk(method, lambda y, t: y, np.ones(1), np.array([0.0, h]), 1e6, 1e6, 10,
                            counts, first_step=h)
        assert counts.steps == 1
        # the stages, and f(y_new) only for a pair whose error estimate weighs it (FSAL)
        assert counts.nfe == len(TABLEAUX[method].b) + (TABLEAUX[method].e[-1] != 0)
        errors.append(abs(ys[1, 0] - np.exp(h)))
    assert 2 ** (order + 1) * 0.8 < errors[0] / errors[1] < 2 ** (order + 1) * 1.2
    assert TABLEAUX[method].order == order  # the order the tableau states is the one measured


@pytest.mark.parametrize("method", ["dopri5", "bosh3", "rkf23"])
def test_runge_kutta_error_follows_the_tolerance(method):
    """The embedded error estimate steers the step: the global error on y' = Ay falls with the
    tolerance and stays within a small multiple of it."""
    t = np.linspace(0.0, 3.0, 4)
    exact = np.array([expm(A * ti) @ Y0 for ti in t])
    errors = []
    for tol in (1e-4, 1e-6, 1e-8):
        ys = odeint(linear, Y0, t, (A,), method=method, rtol=tol, atol=tol)
        errors.append(np.abs(ys - exact).max())
        assert errors[-1] < 50 * tol
    assert errors[0] > errors[1] > errors[2]
