"""A correct array or an error, never a wrong number: the solvers under extreme values, aliased
outputs, the installed scipy, failures in the backward solve, and results independent of what ran
before (issues 16 and 17)."""
import inspect
import warnings

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad, jacobian, make_vjp
from autograd.tracer import getval
from scipy.linalg import expm

import odeint_autograd
from odeint_autograd import ADJOINT_METHODS, DEFAULT_TOL, METHODS, ODESolverError, odeint
from odeint_autograd import _scipy, rk

RK_PAIRS = ("dopri5", "bosh3", "rkf23")
A = np.array([[-0.1, 2.0], [-2.0, -0.1]])
Y0 = np.array([2.0, 0.5])


@pytest.fixture(autouse=True)
def no_warnings():
    """Everything here must raise or succeed, not warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def rk4_steps(method):
    return dict(step_size=1e-3) if method == "rk4" else {}


# --- scipy's solvers: accurate on the installed scipy, or refused -------------------------------

@pytest.mark.parametrize("method", ["lsoda", "bdf"])
def test_stiff_long_decay_is_accurate(method):
    """Where scipy 1.17.1's BDF answers 2.569 for e^-1e6 (the non-stiff 'adams' runs out of
    steps here, an error)."""
    ys = odeint(lambda y, t: -y, np.array([1.0]), np.linspace(0, 1e6, 11), method=method)
    assert abs(ys[-1, 0]) < 1e-6


@pytest.mark.parametrize("method", ["lsoda", "bdf"])
def test_stiff_linear_problem_is_accurate(method):
    """Where scipy 1.17.1's BDF answers 6.36e-5 for e^-10 = 4.54e-5."""
    D = np.diag([-1000.0, -0.1])
    t = np.linspace(0, 100, 5)
    ys = odeint(lambda y, t: D @ y, np.ones(2), t, method=method, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(ys, np.exp(np.outer(t, np.diag(D))), rtol=1e-5, atol=1e-10)


def test_bdf_gradient_of_a_stiff_problem_is_accurate_or_refused():
    """d y1(T) / d k for y' = -diag(1000, k) y, the backward solves through BDF too. Solved
    backwards from T = 10, the fast component cannot come back from e^-10000: the gradient is
    refused (here it would be right, the components being uncoupled, but nothing tells the
    adjoint so); restarted from stored forward states every 1/300, it is accurate."""
    def loss(k, **options):
        return odeint(lambda y, t, k: -anp.array([1000.0, k]) * y, np.ones(2), [0.0, 10.0], (k,),
                      method="bdf", rtol=1e-9, atol=1e-12, **options)[-1, 1]

    with pytest.raises(ODESolverError, match="checkpoints"):
        grad(loss)(0.3)
    np.testing.assert_allclose(grad(loss)(0.3, checkpoints=3000), -10 * np.exp(-3.0), rtol=1e-5)


def relaxation(k, **options):
    f = lambda y, t, k: -k * (y - anp.sin(t)) + 0.3 * anp.sin(y)  # noqa: E731
    return odeint(f, np.zeros(1), [0.0, 10.0], (k,), **options)[-1, 0] ** 2


@pytest.fixture(scope="module")
def relaxation_gradient():
    return grad(relaxation)(10.0, method="dopri5", rtol=1e-12, atol=1e-12)  # direct backprop


@pytest.mark.parametrize("method, adjoint_method", [("bdf", None), ("lsoda", "bdf"),
                                                    ("adams", "bdf"), ("bdf", "lsoda")])
def test_adjoint_of_a_stiff_relaxation_is_accurate_or_refused(method, adjoint_method,
                                                              relaxation_gradient):
    """y' = -k (y - sin t) + 0.3 sin y, L = y(10)^2, dL/dk at k = 10: solved backwards by BDF at
    1e-6, y(0) came back as -6e37 and the gradient as -0.495 (right: 8.08e-3, direct backprop
    at 1e-12). Every gradient must be within 1e-3 of it, or raise."""
    loss, exact = relaxation, relaxation_gradient
    options = dict(method=method, adjoint_method=adjoint_method, rtol=1e-6, atol=1e-6)
    for checkpoints in (None, 20):
        try:
            g = grad(loss)(10.0, checkpoints=checkpoints, **options)
        except ODESolverError as e:
            assert checkpoints is None and "checkpoints=k" in str(e)
            continue
        np.testing.assert_allclose(g, exact, rtol=1e-3)


@pytest.fixture
def scipy_1_17(monkeypatch):
    monkeypatch.setattr(_scipy, "SCIPY_VERSION", (1, 17))


@pytest.mark.parametrize("options", [dict(method="bdf"), dict(method="lsoda"),
                                     dict(method="adams", adjoint_method="bdf"),
                                     dict(method="adams", adjoint_method="lsoda")])
def test_methods_broken_on_scipy_1_17_are_refused_before_any_work(scipy_1_17, options):
    calls = []

    def f(y, t):
        calls.append(t)
        return -y

    with pytest.raises(ODESolverError, match=r"refused.*wrong answers.*scipy>=1\.16,<1\.17"):
        odeint(f, Y0, [0.0, 1.0], **options)
    assert calls == []  # not even the forward solve ran


def test_methods_broken_on_scipy_1_17_are_refused_on_every_path(scipy_1_17):
    """The check sits where every scipy solve starts (forward, backward, checkpoints)."""
    with pytest.raises(ODESolverError, match="refused"):
        _scipy.solve(lambda y, t: -y, np.ones(2), np.array([0.0, 1.0]), "bdf", 1e-6, 1e-6, 100,
                     odeint_autograd.Counts())
    ys = odeint(lambda y, t: -y, Y0, [0.0, 1.0], method="adams", adjoint_method="dopri5",
                rtol=1e-9, atol=1e-9)  # what works on 1.17 still runs
    np.testing.assert_allclose(ys[-1], Y0 * np.exp(-1), rtol=1e-7)


# --- Runge-Kutta methods: max_steps, huge values, overflow, aliased outputs ---------------------

@pytest.mark.parametrize("step_size, max_steps", [(1e-9, 10), (1e-300, 10_000), (0.1, 4)])
def test_rk4_respects_max_steps(step_size, max_steps):
    with pytest.raises(ODESolverError, match=f"max_steps={max_steps}") as info:
        odeint(lambda y, t: -y, np.ones(2), np.linspace(0, 1, 3), method="rk4",
               step_size=step_size, max_steps=max_steps)
    assert info.value.t == 0.0
    # exactly max_steps steps per interval is allowed
    ys = odeint(lambda y, t: -y, np.ones(2), np.linspace(0, 1, 3), method="rk4", step_size=0.05,
                max_steps=10)
    np.testing.assert_allclose(ys[-1], np.exp(-1), rtol=1e-6)


@pytest.mark.parametrize("method", RK_PAIRS)
def test_runge_kutta_pairs_handle_huge_derivatives(method):
    """y' = 1e160: the starting step's norms overflowed when squared (ZeroDivisionError)."""
    ys = odeint(lambda y, t: 1e160 + 0 * y, np.array([1.0, -1.0]), [0.0, 0.5, 1.0],
                method=method)
    np.testing.assert_allclose(ys[:, 0], [1.0, 0.5e160, 1e160], rtol=1e-6)
    # and as the adjoint solver, with an adjoint state of 1e160
    g = grad(lambda y0: 1e160 * anp.sum(odeint(lambda y, t: -0.5 * y, y0, [0.0, 1.0],
                                               adjoint_method=method)[-1]))(Y0)
    np.testing.assert_allclose(g, 1e160 * np.exp(-0.5), rtol=1e-6)


@pytest.mark.parametrize("y0, k, t", [
    (1.0, [1e10], [0.0, 1e-10, 2e-10]),  # Hairer's starting step: |y| / |f| = 1 / k
    (0.0, [1e10], [0.0, 1e-10]),  # y0 = 0: the fallback step, cut to one time constant
    (1.0, [1e10, 0.0, 0.0, 0.0], [0.0, 1e-10]),  # a start of RMS norms, z = -sqrt(4) / 2
    (1.0, [1e10] + [0.0] * 15, [0.0, 5e-10]),
])
def test_bosh3_does_not_step_where_its_error_estimate_is_blind(y0, k, t):
    """bosh3's estimate on y' = -k y is z^3 (1 + z) / 48 (z = -h k), zero at h = 1 / k, where
    a first step from its heuristics lands on such decays: accepted 3.5 % wrong at any
    tolerance (and its gradient 36 % wrong)."""
    k, t, target = np.array(k), np.array(t), 1.0 - y0  # from 1 decays to 0, from 0 rises to 1
    f = lambda y, t, c: c * k * (target - y)  # noqa: E731
    exact = target + (y0 - target) * np.exp(-np.outer(t, k))
    ys = odeint(f, np.full(len(k), y0), t, (1.0,), method="bosh3")
    np.testing.assert_allclose(ys, exact, rtol=1e-6, atol=1e-6)  # 3.5-9.4 % off before
    g = grad(lambda c: odeint(f, np.full(len(k), y0), t, (c,), method="bosh3")[-1, 0])(1.0)
    np.testing.assert_allclose(g, (target - y0) * k[0] * t[-1] * np.exp(-k[0] * t[-1]),
                               rtol=1e-5)


def test_bosh3_as_the_adjoint_after_a_jump_is_not_blind():
    # the adjoint of y1 is 0 on the first backward interval, so the carried step is long; it
    # jumps to 1 at t = 1e-3, and the last interval (one time constant) was one step at z = -1
    f = lambda y, t: anp.array([-1e3 * y[0], -y[1]])  # noqa: E731

    def loss(y0):
        ys = odeint(f, y0, [0.0, 1e-3, 2.0], method="adams", rtol=1e-10, atol=1e-12,
                    adjoint_method="bosh3", adjoint_rtol=1e-8, adjoint_atol=1e-10)
        return ys[1, 0] + ys[-1, 1]

    np.testing.assert_allclose(grad(loss)(np.array([0.0, 1.0])), [np.exp(-1), np.exp(-2)],
                               rtol=1e-6)  # was 1/3 for the first


def test_bosh3_keeps_its_tolerance_on_a_decay_at_loose_tolerances():
    # y' = -y at unit output times: at rtol 1e-2 most intervals were one step at z = -1,
    # 9.4 % wrong each, and y(20) came out 0.16 of the exact
    ys = odeint(lambda y, t: -y, np.ones(1), np.arange(21.0), method="bosh3", rtol=1e-2)[:, 0]
    per_interval = ys[1:] / ys[:-1] * np.e - 1
    assert np.abs(per_interval[:10]).max() < 3e-2  # where rtol |y| >> atol


def test_rms_does_not_overflow():
    with np.errstate(all="ignore"):  # as inside the solves
        np.testing.assert_allclose(rk._rms(np.array([3e200, 4e200])), np.sqrt(12.5) * 1e200)
        assert rk._rms(np.array([1.0, np.inf])) == np.inf
        assert rk._rms(np.array([3.0, 4.0])) == np.sqrt(12.5)


@pytest.mark.parametrize("method", METHODS)
def test_overflowing_solutions_are_errors_not_inf(method):
    """y = 1e308 (1 + t) overflows at t = 0.797 (the Runge-Kutta methods returned inf)."""
    rk4_options = dict(step_size=0.1) if method == "rk4" else {}
    with pytest.raises(ODESolverError) as info:
        odeint(lambda y, t: 1e308 + 0 * y, np.array([1e308]), [0.0, 10.0], method=method,
               **rk4_options)
    assert 0.0 <= info.value.t <= 10.0
    # y = 1e300 e^t overflows at t = 19.007, with moderate derivatives up to there
    with pytest.raises(ODESolverError) as info:
        odeint(lambda y, t: y, np.array([1e300]), [0.0, 10.0, 100.0], method=method,
               **rk4_options)
    assert 10.0 <= info.value.t <= 19.1


def test_rk4_step_that_overflows_is_an_error():
    """Finite stages whose combination overflows: rk4 returned inf at t = 100."""
    with pytest.raises(ODESolverError, match="non-finite") as info:
        odeint(lambda y, t: y, np.array([1e300]), [0.0, 10.0, 100.0], method="rk4")
    assert info.value.t == 100.0


def buffer_reusing(matrix):
    """dy/dt = matrix @ y, returned in one buffer that every call overwrites."""
    out = np.empty(len(matrix))

    def f(y, t):
        out[:] = matrix @ y
        return out

    return f


@pytest.mark.parametrize("method", METHODS)
def test_func_returning_one_reused_buffer_gives_the_right_answer(method):
    t = np.linspace(0, 3, 4)
    ys = odeint(buffer_reusing(A), Y0, t, method=method,
                **(dict(step_size=1e-2) if method == "rk4" else dict(rtol=1e-9, atol=1e-9)))
    exact = np.array([expm(A * ti) @ Y0 for ti in t])
    np.testing.assert_allclose(ys, exact, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("adjoint_method", ("adams",) + RK_PAIRS)
def test_value_and_vjp_returning_reused_buffers_gives_the_right_gradient(adjoint_method):
    """The fused backward call may reuse its output buffers too (y' = -k y, L = sum y(T))."""
    f_out, gy_out = np.empty(len(Y0)), np.empty(len(Y0))

    def f(y, t, k):
        return -k * y

    def value_and_vjp(g, y, t, k):
        f_out[:] = -k * y
        gy_out[:] = -k * g
        return f_out, gy_out, 0.0, (-np.sum(g * y),)

    f.value_and_vjp = value_and_vjp
    T, k = 2.0, 0.7
    loss = lambda y0, k: anp.sum(odeint(f, y0, [0.0, 1.0, T], (k,), method="adams",  # noqa: E731
                                        adjoint_method=adjoint_method, rtol=1e-10,
                                        atol=1e-10)[-1])
    g_y0, g_k = grad(loss, (0, 1))(Y0, k)
    np.testing.assert_allclose(g_y0, np.exp(-k * T), rtol=1e-6)
    np.testing.assert_allclose(g_k, -T * np.sum(Y0) * np.exp(-k * T), rtol=1e-6)


# --- the time reported by a failure -------------------------------------------------------------

@pytest.mark.parametrize("method", ADJOINT_METHODS)
def test_a_failure_at_the_start_reports_the_start_time(method):
    """atol = 0 with a zero component: the solver refuses at t[0]. LSODA's info['tcur'] is
    uninitialised memory then (it reported -0.677, 4.7e-310, ... on identical calls)."""
    times = set()
    for _ in range(3):
        with pytest.raises(ODESolverError) as info:
            odeint(lambda y, t: -y, np.array([1.0, 0.0]), np.linspace(0, 1, 3), atol=0,
                   rtol=1e-6, method=method)
        times.add(info.value.t)
    assert times == {0.0}


@pytest.mark.parametrize("method", ADJOINT_METHODS)
def test_a_failure_in_a_later_interval_reports_a_time_in_it(method):
    """y' = y^2, y(0) = 1 blows up at t = 1, in the third of the output intervals."""
    for _ in range(3):
        with pytest.raises(ODESolverError) as info:
            odeint(lambda y, t: y ** 2, np.array([1.0]), [0.0, 0.5, 0.8, 2.0, 3.0], method=method)
        assert 0.8 <= info.value.t < 1.01


# --- failures in the backward (adjoint) solve ---------------------------------------------------

def mlp_loss(method, **options):
    W = np.random.RandomState(0).randn(3, 3)

    def f(y, t, W):
        return anp.tanh(anp.dot(W, y))

    return lambda W: anp.sum(odeint(f, np.ones(3), [0.0, 0.5, 1.0], (W,), method=method,
                                    **options)), W


@pytest.mark.parametrize("method, adjoint_method", [(m, None) for m in ADJOINT_METHODS]
                         + [("adams", m) for m in RK_PAIRS])
def test_a_failed_adjoint_solve_says_so_with_its_time(method, adjoint_method):
    loss, W = mlp_loss(method, adjoint_method=adjoint_method, adjoint_rtol=1e-300,
                       adjoint_atol=1e-300, max_steps=500)
    loss(W)  # the forward solve succeeds
    with pytest.raises(ODESolverError, match="adjoint .backward. solve") as info:
        grad(loss)(W)
    assert info.value.solve == "adjoint" and 0.0 <= info.value.t <= 1.0


@pytest.mark.parametrize("adjoint_method", ("lsoda",) + RK_PAIRS)
def test_non_finite_adjoint_dynamics_are_an_adjoint_error(adjoint_method):
    def f(y, t):
        return -y

    f.value_and_vjp = lambda g, y, t: (-y, np.full_like(y, np.nan), 0.0, ())
    loss = lambda y0: anp.sum(odeint(f, y0, [0.0, 1.0], adjoint_method=adjoint_method))  # noqa
    with pytest.raises(ODESolverError, match="adjoint .backward. solve.*non-finite") as info:
        grad(loss)(Y0)
    assert info.value.solve == "adjoint" and info.value.t == 1.0


@pytest.mark.parametrize("method", METHODS)
def test_a_failed_solve_is_counted_in_the_stats(method):
    stats = odeint_autograd.SolverStats()
    with pytest.raises(ODESolverError):  # y' = y^2 from 1 blows up at t = 1
        odeint(lambda y, t: y ** 2, np.array([1.0]), [0.0, 0.9, 2.0], method=method,
               stats=stats, **rk4_steps(method))
    # VODE/LSODA's steps are known up to the last output time reached (0.9)
    assert stats.forward.solves == 1 and stats.forward.nfe > 10 and stats.forward.steps > 2
    if method in ADJOINT_METHODS:  # and a failed backward solve in the backward counts
        stats = odeint_autograd.SolverStats()
        loss, W = mlp_loss(method, adjoint_rtol=1e-300, adjoint_atol=1e-300, max_steps=50,
                           stats=stats)
        with pytest.raises(ODESolverError, match="adjoint"):
            grad(loss)(W)
        assert stats.forward.solves == 1 and stats.backward.solves == 1
        assert stats.backward.nfe >= 1 and stats.backward.steps == 0  # refused at its start


@pytest.mark.parametrize("method", ADJOINT_METHODS)
def test_steps_after_the_dynamics_raised_are_not_counted(method):
    # VODE/LSODA step on through the zeros fed to them after the dynamics raised
    def f(y, t):
        if t > 0.3:
            raise KeyError("late")
        return -y

    stats = odeint_autograd.SolverStats()
    with pytest.raises(KeyError):
        odeint(f, Y0, [0.0, 1.0], method=method, stats=stats)
    assert stats.forward.nfe > 5 and stats.forward.steps == 0


def test_a_failed_forward_solve_is_labelled_forward():
    with pytest.raises(ODESolverError) as info:
        odeint(lambda y, t: y ** 2, np.array([1.0]), [0.0, 2.0])
    assert info.value.solve == "forward" and "adjoint" not in str(info.value)


# --- traced values in lists ---------------------------------------------------------------------

@pytest.mark.parametrize("method", METHODS)
def test_times_and_state_given_as_lists_of_traced_values(method):
    options = dict(rtol=1e-10, atol=1e-10) if method != "rk4" else dict(step_size=1e-3)

    def loss(T, a):
        return anp.sum(odeint(lambda y, t: -y, [a, 2.0], [0.0, T], method=method,
                              **options)[-1])

    g_T, g_a = grad(loss, (0, 1))(1.0, 1.0)
    np.testing.assert_allclose(g_T, -3 * np.exp(-1.0), rtol=1e-7)
    np.testing.assert_allclose(g_a, np.exp(-1.0), rtol=1e-7)
    as_array = grad(lambda T: anp.sum(odeint(lambda y, t: -y, np.array([1.0, 2.0]),
                                             anp.array([0.0, T]), method=method, **options)[-1]))
    assert grad(lambda T: loss(T, 1.0))(1.0) == as_array(1.0)


def test_func_returning_a_list_of_traced_values():
    f = lambda y, t, k: [-k * y[0], -2 * k * y[1]]  # noqa: E731
    g = grad(lambda k: odeint(f, np.ones(2), [0.0, 1.0], (k,), method="dopri5", rtol=1e-10,
                              atol=1e-10)[-1, 1])(0.5)
    np.testing.assert_allclose(g, -2 * np.exp(-1.0), rtol=1e-7)


# --- per-call state: results never depend on what ran before ------------------------------------

@pytest.mark.parametrize("adjoint_method", RK_PAIRS + ("adams",))
def test_a_jacobian_row_equals_an_independent_gradient(adjoint_method):
    """One VJP used for every row of a jacobian; the step a Runge-Kutta adjoint carries over the
    intervals must not leak from one row's backward pass into the next (it gave 1.5e-8 off)."""
    W = np.random.RandomState(1).randn(3, 3)

    def f(y, t, W):
        return anp.tanh(anp.dot(W, y))

    def outputs(W):
        return odeint(f, np.ones(3), np.linspace(0, 1, 5), (W,), method="lsoda",
                      adjoint_method=adjoint_method, rtol=1e-4, atol=1e-4)[-1]

    J = jacobian(outputs)(W)
    for k in range(3):
        np.testing.assert_array_equal(J[k], grad(lambda W: outputs(W)[k])(W))
    vjp, _ = make_vjp(outputs)(W)
    g = np.array([1.0, -2.0, 0.5])
    np.testing.assert_array_equal(vjp(g), vjp(g))


# --- the package's shape ------------------------------------------------------------------------

def test_errors_have_their_own_module():
    assert odeint_autograd.ODESolverError is odeint_autograd.errors.ODESolverError
    assert issubclass(ODESolverError, RuntimeError)
    assert "_scipy" not in inspect.getsource(rk)  # the Runge-Kutta solvers need no scipy
    # tolerances left out are DEFAULT_TOL (None in the signature, so that 'rk4' can refuse them)
    f, t = (lambda y, t: -y), np.linspace(0.0, 2.0, 3)
    for method in ("lsoda", "adams", "dopri5"):
        np.testing.assert_array_equal(
            odeint(f, np.ones(2), t, method=method),
            odeint(f, np.ones(2), t, method=method, rtol=DEFAULT_TOL, atol=DEFAULT_TOL))



# --- the dynamics are evaluated only inside the span they are solved over ------------------------

def _inside(t0, t1, func):
    """func, refusing (AssertionError, which odeint passes on) a time outside [t0, t1]."""
    low, high = min(t0, t1), max(t0, t1)

    def checked(y, t, *args):
        assert low <= float(getval(t)) <= high, f"evaluated at t = {float(getval(t))!r}"
        return func(y, t, *args)
    return checked


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("span", [(0.0, 1.9), (1.9, 0.0)])
def test_the_dynamics_are_not_evaluated_past_the_span(method, span):
    # y' = -sqrt(y) (forwards) reaches 0 at t = 2, and sqrt(y) is nan past it; a slow forcing
    # made the Runge-Kutta pairs probe their first step at t = 1e4, where exp(t) overflows
    sign = 1.0 if span[1] > span[0] else -1.0
    exact = (1.0 - sign * (span[1] - span[0]) / 2) ** 2
    tight = rk4_steps(method) or dict(rtol=1e-8, atol=1e-10)
    y = odeint(_inside(*span, lambda y, t: -sign * anp.sqrt(y)), np.array([1.0]),
               np.linspace(*span, 4), method=method, **tight)
    np.testing.assert_allclose(y[-1], [exact], rtol=1e-5)
    forcing = _inside(0.0, 1.0, lambda y, t: 1e-6 * anp.exp(t) + 0 * y)
    y = odeint(forcing, np.ones(1), [0.0, 1.0], method=method, **rk4_steps(method))
    np.testing.assert_allclose(y[-1], [1 + 1e-6 * np.expm1(1.0)], rtol=2e-7)  # default tol
    # a probe a whole span ahead, where t[0] + (t[-1] - t[0]) rounds past t[-1]
    t = [-1.9907001027432838, 0.515690120220412]
    y = odeint(_inside(*t, lambda y, t: -1e-3 * y), np.ones(1), t, method=method,
               **rk4_steps(method))
    np.testing.assert_allclose(y[-1], np.exp(-1e-3 * (t[1] - t[0])), rtol=1e-7)


@pytest.mark.parametrize("method, adjoint_method", [(m, None) for m in ADJOINT_METHODS]
                         + [("adams", m) for m in ("lsoda", "bdf") + RK_PAIRS])
def test_the_adjoint_is_not_evaluated_past_the_span(method, adjoint_method):
    """y' = -a y + sqrt(t) is defined from t = 0 on: the backward solve must stop there."""
    f = _inside(0.0, 0.7, lambda y, t, a: -a * y + anp.sqrt(t))
    t = np.array([0.0, 0.1, 0.3, 0.7])
    def loss(a, **options):
        return anp.sum(odeint(f, np.array([1.0]), t, args=(a,), **options))
    expected = grad(lambda a: loss(a, method="dopri5", rtol=1e-11, atol=1e-11))(1.0)
    np.testing.assert_allclose(grad(lambda a: loss(a, method=method, rtol=1e-9, atol=1e-9,
                                                   adjoint_method=adjoint_method))(1.0),
                               expected, rtol=1e-6)


# --- a traced float32 state or time is solved in float64 -----------------------------------------

@pytest.mark.parametrize("method", ("adams", "lsoda") + RK_PAIRS)
def test_a_traced_float32_state_or_time_is_solved_in_float64(method):
    def final(y0, t):
        return odeint(lambda y, t: -y, y0, t, method=method, rtol=1e-10, atol=1e-10)[-1, 0]
    t = np.array([0.0, 1.0])
    y0 = np.ones(1)

    def check(value):
        assert getval(value).dtype == np.float64 and abs(getval(value) - np.exp(-1.0)) < 1e-8
        return value
    # traced or not, a float32 y0 or t gives the float64 answer, to the tolerance
    np.testing.assert_allclose(grad(lambda x: check(final(x.astype(np.float32), t)))(y0),
                               [np.exp(-1.0)], rtol=1e-6)
    np.testing.assert_allclose(grad(lambda s: check(final(y0, s.astype(np.float32))))(t),
                               [np.exp(-1.0), -np.exp(-1.0)], rtol=1e-6)
    check(final(y0.astype(np.float32), t.astype(np.float32)))


@pytest.mark.parametrize("method", METHODS)
def test_a_state_whose_sum_overflows_solves_without_a_warning(method):
    y = odeint(lambda y, t: -y, np.full(1000, 1e306), [0.0, 1.0], method=method,
               **rk4_steps(method))
    np.testing.assert_allclose(y[-1] / 1e306, np.exp(-1.0), rtol=1e-3)


@pytest.mark.parametrize("method", ("adams", "bdf", "lsoda") + RK_PAIRS)
def test_tolerances_float64_cannot_meet_are_an_error(method):
    # the pairs' error estimate rounds to 0 there: dopri5 reported rtol 1e-20 met, its error 3e-16
    with pytest.raises(ODESolverError, match="accuracy"):
        odeint(lambda y, t: -y, np.ones(1), [0.0, 1.0], method=method, rtol=1e-20, atol=1e-30)
    y = odeint(lambda y, t: -y, np.ones(1), [0.0, 0.1], method=method, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(y[-1], np.exp(-0.1), rtol=1e-11)


@pytest.mark.parametrize("method", RK_PAIRS)
def test_an_output_time_a_few_ulps_past_a_step_far_from_zero_is_reached(method):
    # at t = 1e6 a step landed 2-16 ulps short of 1000000.92056344 (dopri5's), and the step left
    # was refused as a 'step size underflow'
    t = np.array([1e6, 1000000.92056344, 1e6 + 10])
    y = odeint(lambda y, t: anp.stack([y[1], -y[0]]), np.array([1.0, 0.0]), t, method=method,
               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(y[-1], [np.cos(10.0), -np.sin(10.0)], atol=1e-4)


def test_rk4_refuses_a_span_float64_cannot_hold():
    # its step (t[1] - t[0]) / n was inf, and func was called at t = nan
    with pytest.raises(ValueError, match="t spans inf"):
        odeint(lambda y, t: 0 * y, np.ones(1), [-1.7e308, 1.7e308], method="rk4")
