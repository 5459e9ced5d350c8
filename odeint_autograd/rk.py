"""Runge-Kutta solvers written in autograd operations: the paper's RK-Net (direct backprop).

Autograd records every stage of every step, so gradients are exact for the discretisation and
memory grows with the number of steps (unlike the adjoint). Step sizes are chosen from values
only (not differentiated), and the last step of each interval lands exactly on the output time,
so gradients with respect to the output times are those of the discrete solution.
"""
import dataclasses

import autograd.numpy as anp
import numpy as np
from autograd.tracer import getval, isbox

from .errors import GIVE_ATOL, ODESolverError, all_finite


@dataclasses.dataclass(frozen=True)
class Tableau:
    """An embedded explicit Runge-Kutta pair: the stages after the first have nodes c and
    coefficients a; b gives the propagated solution (its order `order`), and e the difference
    between it and the embedded solution (order `error_order`). e's last entry weighs f(y_new),
    the next step's first stage: a pair that uses it (first same as last, FSAL) evaluates it with
    every step, one whose last entry is 0 only when a next step follows in the same solve.
    e_guard, if given, is a second estimate every step must pass too, for a pair whose e is blind
    somewhere."""

    c: tuple
    a: tuple
    b: tuple
    e: tuple
    order: int
    error_order: int
    e_guard: tuple = None


TABLEAUX = {
    # Dormand and Prince 5(4), the paper's RK-Net and torchdiffeq's/scipy's RK45 default.
    "dopri5": Tableau(
        c=(1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0),
        a=((1 / 5,),
           (3 / 40, 9 / 40),
           (44 / 45, -56 / 15, 32 / 9),
           (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
           (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656)),
        b=(35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
        e=(35 / 384 - 5179 / 57600, 0.0, 500 / 1113 - 7571 / 16695, 125 / 192 - 393 / 640,
           -2187 / 6784 + 92097 / 339200, 11 / 84 - 187 / 2100, -1 / 40),
        order=5, error_order=4),
    # Bogacki and Shampine 3(2) (scipy's RK23): 3 new evaluations a step instead of 6, the cheaper
    # choice when steps are short anyway (an adjoint restarting at closely spaced output times,
    # loose tolerances).
    "bosh3": Tableau(
        c=(1 / 2, 3 / 4),
        a=((1 / 2,),
           (0.0, 3 / 4)),
        b=(2 / 9, 1 / 3, 4 / 9),
        e=(2 / 9 - 7 / 24, 1 / 3 - 1 / 4, 4 / 9 - 1 / 3, -1 / 8),
        order=3, error_order=2,
        # e on y' = lambda y is -z^3 (1 + z) / 48 (z = h lambda), zero at z = -1 and small near
        # it: where Hairer's starting step lands on a linear decay (|y| / |f|), at an output time
        # one time constant away, after a carried step, or at loose tolerances, steps were
        # accepted 3.5-28 % wrong. The guard is the difference from the midpoint rule y + h k2
        # (z^3 / 6) over 8: e's size for small z, with no zero.
        e_guard=(2 / 72, (1 / 3 - 1) / 8, 4 / 72, 0.0)),
    # Fehlberg's 2(3) pair, propagated at order 3: 3 evaluations a step like bosh3, but no FSAL
    # stage, so a step right after a restart (the adjoint's jump at each output time) costs 3
    # evaluations where bosh3's costs 4; its error estimate (against Heun's method) is the more
    # cautious, so where steps are shorter than the output spacing it takes more of them.
    "rkf23": Tableau(
        c=(1.0, 1 / 2),
        a=((1.0,),
           (1 / 4, 1 / 4)),
        b=(1 / 6, 1 / 6, 2 / 3),
        e=(1 / 6 - 1 / 2, 1 / 6 - 1 / 2, 2 / 3, 0.0),
        order=3, error_order=2),
}


class _Counted:
    """The dynamics, counted and checked for non-finite values. A plain array is copied (and
    widened to float64): the stages are kept while later ones are evaluated, so a func that
    returns one buffer it overwrites on every call must not alias them."""

    def __init__(self, fun, method, counts):
        self.fun, self.method, self.counts = fun, method, counts

    def __call__(self, y, t):
        self.counts.nfe += 1
        f = self.fun(y, t)
        f = f if isbox(f) else np.array(f, dtype=float)
        if not all_finite(getval(f)):
            raise ODESolverError("the dynamics returned non-finite values; the solution may blow "
                                 "up before this time", t=float(getval(t)), method=self.method)
        return f


def rk4(fun, y0, t, step_size, max_steps, counts):
    """Classical RK4; each interval is cut into ceil(|dt| / step_size) equal steps (1 if None),
    at most max_steps of them. Returns ys; `counts` (a Counts) receives NFE and steps."""
    f = _Counted(fun, "rk4", counts)
    ys, y = [y0], y0
    for i in range(1, len(t)):
        span = t[i] - t[i - 1]
        n = 1.0 if step_size is None else max(1.0, np.ceil(abs(getval(span)) / step_size - 1e-9))
        if n > max_steps:
            raise ODESolverError(f"too many steps: step_size={step_size} needs {n:.0f} steps "
                                 f"between t = {float(getval(t[i - 1]))!r} and "
                                 f"{float(getval(t[i]))!r}, more than max_steps={max_steps}",
                                 t=float(getval(t[i - 1])), method="rk4")
        n = int(n)
        h = span / n
        for j in range(n):
            tj = t[i - 1] + j * h
            t_next = t[i] if j == n - 1 else tj + h  # not tj + h rounded past the output time
            k1 = f(y, tj)
            k2 = f(y + h / 2 * k1, tj + h / 2)
            k3 = f(y + h / 2 * k2, tj + h / 2)
            k4 = f(y + h * k3, t_next)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            if not all_finite(getval(y)):
                raise ODESolverError("the solution became non-finite (overflow): it may blow up "
                                     "here", t=float(getval(tj + h)), method="rk4")
            counts.steps += 1
        ys.append(y)
    return anp.stack(ys)


def _rms(x):
    """Root mean square; where the squares overflow, computed on x scaled by its largest entry."""
    if not np.size(x):
        return 0.0
    rms = float(np.sqrt(np.mean(np.square(x))))
    if rms == np.inf and all_finite(x):
        largest = float(np.max(np.abs(x)))
        rms = largest * float(np.sqrt(np.mean(np.square(x / largest))))
    return rms


def _scaled(x, scale):
    """x / scale, 0 where both are 0 (a component held at 0 under atol = 0 has no error)."""
    return np.divide(x, scale, out=np.zeros(np.shape(x)), where=(x != 0))


def _check_accuracy(y, rtol, atol, t, method):
    """Raise ODESolverError where the tolerances ask for more accuracy than float64 holds for y
    (VODE's test: eps times the RMS of y over its error weight above 1), which the pairs' error
    estimate, rounded to 0, would otherwise report as met."""
    y = getval(y)
    if np.finfo(float).eps * _rms(_scaled(y, atol + rtol * np.abs(y))) > 1:
        raise ODESolverError("excess accuracy requested: the tolerances are too small for "
                             "float64 (with atol = 0, a state so small that rtol * |y| "
                             "underflows asks it too: give atol)", t=float(getval(t)),
                             method=method)


def _error_norm(step, stages, weights, scale):
    """The RMS of the error estimate step * sum(w_i k_i) relative to its scale."""
    err = getval(step) * sum(w * getval(k) for w, k in zip(weights, stages) if w)
    return _rms(_scaled(err, scale))


def _initial_step(f, y0, f0, t0, t_end, rtol, atol, error_order):
    """Hairer, Norsett and Wanner's starting step (one extra evaluation), their fallback steps
    (1e-6, for time of order 1) taken relative to the solve's span; the extra evaluation at most
    at t_end, inside the span, where the dynamics are defined."""
    t0, t_end = float(getval(t0)), float(getval(t_end))
    direction, span = np.sign(t_end - t0), abs(t_end - t0)
    y0v, f0v = getval(y0), getval(f0)
    scale = atol + rtol * np.abs(y0v)
    moving = (scale == 0) & (f0v != 0)
    if np.any(moving):
        raise ODESolverError(f"component {int(np.argmax(moving))} of the state is zero at the "
                             "start and moves, and atol is 0: its error weight rtol * |y| + atol "
                             f"is zero, so no step can meet the tolerance: {GIVE_ATOL}",
                             t=t0, method=f.method)
    d0, d1 = _rms(_scaled(y0v, scale)), _rms(_scaled(f0v, scale))
    h0 = 1e-6 * span if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
    if not 0 < h0 < np.inf:  # the derivative overflows its error scale: no usable step
        return 0.0
    probe = min(h0, span)
    t_probe = t0 + direction * probe
    if direction * (t_probe - t_end) > 0:  # rounded past the span's end
        t_probe = t_end
    f1 = getval(f(y0v + direction * probe * f0v, t_probe))
    d2 = _rms(_scaled(f1 - f0v, scale)) / probe
    h1 = (max(1e-6 * span, h0 * 1e-3) if max(d1, d2) <= 1e-15
          else (0.01 / max(d1, d2)) ** (1 / (error_order + 1)))
    return min(100 * h0, h1)


def embedded_rk(method, fun, y0, t, rtol, atol, max_steps, counts, first_step=None):
    """Adaptive solve with the pair TABLEAUX[method] and an RMS error norm; returns
    (ys, next_step), and `counts` (a Counts) receives NFE and accepted steps.

    first_step: the first step size tried (None: chosen from the dynamics). next_step is the
    step size the solve would take next, so that consecutive solves (the adjoint's intervals)
    can carry it over. A step whose new state is not finite is rejected like an inaccurate one."""
    tab = TABLEAUX[method]
    exponent = -1.0 / (tab.error_order + 1)
    f = _Counted(fun, method, counts)
    direction = 1.0 if getval(t[-1]) > getval(t[0]) else -1.0
    y, tc = y0, t[0]
    # |y| / (atol + rtol |y|) < 1 / rtol: with rtol above eps and atol above 0 (scalars, or the
    # adjoint's arrays) float64 always holds the tolerance, and no pass over y is needed
    check_accuracy = not (np.min(rtol) > np.finfo(float).eps and np.min(atol) > 0)
    if check_accuracy:
        _check_accuracy(y, rtol, atol, tc, method)
    if first_step is not None:
        k1, h = None, first_step
    else:
        k1 = f(y, tc)
        h = _initial_step(f, y, k1, tc, t[-1], rtol, atol, tab.error_order)
    ys = [y0]
    for i in range(1, len(t)):
        interval_steps = 0
        while direction * (getval(t[i]) - getval(tc)) > 0:
            if interval_steps >= max_steps:
                raise ODESolverError(f"too many steps: more than max_steps={max_steps} steps "
                                     "between two output times", t=float(getval(tc)),
                                     method=method)
            remaining = abs(getval(t[i]) - getval(tc))
            # the shortest step float64 resolves at these times: a step that would leave less
            # than it before t[i] goes to t[i] (at large |t| it falls short by a few ulps)
            shortest = 16 * np.finfo(float).eps * max(abs(getval(tc)), abs(getval(t[i])), 1e-300)
            last = h >= remaining * (1 - 1e-12) or remaining - h <= shortest
            step = (t[i] - tc) if last else direction * h  # land exactly on the output time
            if abs(getval(step)) <= 16 * np.finfo(float).eps * max(abs(getval(tc)), 1e-300):
                raise ODESolverError("step size underflow: the solution may blow up here",
                                     t=float(getval(tc)), method=method)
            if k1 is None:
                k1 = f(y, tc)
            t_new = t[i] if last else tc + step  # not tc + step rounded past the output time
            ks = [k1]
            for c, a in zip(tab.c, tab.a):
                ks.append(f(y + step * sum(aj * kj for aj, kj in zip(a, ks) if aj),
                            t_new if c == 1 else tc + c * step))
            y_new = y + step * sum(b * k for b, k in zip(tab.b, ks) if b)
            if all_finite(getval(y_new)):
                k_last = f(y_new, t_new) if tab.e[-1] else None  # next step's first stage
                scale = atol + rtol * np.maximum(np.abs(getval(y)), np.abs(getval(y_new)))
                err_norm = max(_error_norm(step, ks + [k_last], e, scale)
                               for e in (tab.e, tab.e_guard) if e is not None)
            else:
                err_norm = np.inf
            if err_norm <= 1.0:
                y, tc, k1 = y_new, t_new, k_last
                if check_accuracy:
                    _check_accuracy(y, rtol, atol, tc, method)
                interval_steps += 1
                counts.steps += 1
                factor = 10.0 if err_norm == 0 else min(10.0, 0.9 * err_norm ** exponent)
                # a step cut short to land on t[i] says nothing against the step size h
                if abs(getval(step)) >= h * (1 - 1e-12):
                    h = h * max(0.2, factor)
            elif np.isfinite(err_norm):
                h = abs(getval(step)) * max(0.2, 0.9 * err_norm ** exponent)
            else:
                h = abs(getval(step)) * 0.2
        ys.append(y)
    return anp.stack(ys), h
