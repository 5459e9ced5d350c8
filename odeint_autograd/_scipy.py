"""The forward solve through scipy's compiled ODE solvers (VODE and LSODA).

Plain numpy in, plain numpy out: the states at every requested time, with the counts of what the
solver did. Four properties of scipy's solvers shape this file:

- A Python exception raised inside the dynamics cannot unwind scipy's compiled solvers (they keep
  calling back with the error set and return garbage). So the dynamics run inside `_Guarded`,
  which keeps the first exception, feeds the solver zeros so that it finishes quickly, and the
  exception is raised once the solver has returned.
- VODE and LSODA keep their state in process-wide variables: a solve started from inside the
  dynamics of another corrupts the outer one. `_refuse_nested` refuses such nested solves with a
  clear error, and `_take` serialises solves from different threads. scipy 1.16 guards each
  of the two with a lock of its own, taken for each run, so a solve by LSODA (or VODE) started
  from the dynamics of another on the same thread, odeint's inside scipy's or scipy's inside
  odeint's, would wait forever: `_SolverLock` refuses it instead. odeint holds it for the whole
  of its solve, and it checks the handle of scipy's other runs once they hold it (scipy checks
  before, so a run that waited could go on from another solve's state). A refusal caught inside
  the outer dynamics leaves the outer solve whole. Two threads that nest the two solvers in
  opposite orders wait on each other, as scipy's own do.
- The solvers' own vector operations go through the OpenBLAS bundled with scipy's wheels, whose
  threads keep spinning after each call and take cores from the dynamics' own threads.
  `_scipy_blas_single_threaded` limits that library, and only that one (numpy's, used by the
  dynamics, is a separate library), while scipy solves.
- scipy 1.17 replaced the Fortran VODE and LSODA with a C translation that returns wrong answers
  for some methods (docs/scipy_version.md); `refuse_broken` keeps them from running.
- VODE and LSODA print their messages (warnings on successful solves too) straight to file
  descriptor 1, past sys.stdout and the warnings filter. `_messages` catches that text during a
  solve: a failure's error quotes it, a success drops it.
"""
import _thread
import os
import re
import sys
import threading
import warnings

import numpy as np
import scipy
from scipy.integrate import _ode, ode

from ._messages import collect, redirect, redirected_here, restore
from .errors import GIVE_ATOL, NestedSolveError, ODESolverError, all_finite

# States above this size get a diagonal finite-difference Jacobian in the stiff methods instead of
# a dense one: LSODA and BDF would otherwise allocate n x n doubles (1.3 TB at n = 400,000).
DENSE_JACOBIAN_MAX = 1000

SCIPY_VERSION = tuple(int(part) for part in re.findall(r"\d+", scipy.__version__)[:2])

# odeint's method: the integrator of scipy's `ode` that runs it
SCIPY_INTEGRATORS = {"adams": "vode", "bdf": "vode", "lsoda": "lsoda"}

# What returns wrong answers, without an error, from scipy 1.17 on (measured on 1.17.1 against
# closed forms and a tight Radau solve: docs/scipy_version.md).
_BROKEN_FROM_1_17 = {
    "bdf": "VODE's BDF method",
    "lsoda": "LSODA through scipy.integrate.ode",
}

_ISTATE_MESSAGES = {
    -1: "too many steps: more than max_steps={max_steps} internal steps between two output times "
        "(the solution may blow up near this time; if not, raise max_steps, loosen the "
        "tolerances, or try method='bdf' if the problem is stiff)",
    -2: "excess accuracy requested: the tolerances are too small for float64",
    -4: "repeated error test failures (step size underflow: the solution may blow up or the "
        "dynamics may be discontinuous)",
    -5: "repeated convergence failures of the corrector (step size underflow; for a stiff "
        "problem try method='bdf' or 'lsoda')",
    -6: "an error weight became zero (a component vanished while atol = 0)",
}


def refuse_broken(method):
    """Raise ODESolverError if `method` is known to return wrong answers on this scipy."""
    if SCIPY_VERSION >= (1, 17) and method in _BROKEN_FROM_1_17:
        raise ODESolverError(
            f"refused: {_BROKEN_FROM_1_17[method]} returns wrong answers without an error on "
            f"scipy {scipy.__version__} (scipy 1.17's C translation of VODE/LSODA; see "
            "docs/scipy_version.md). Install scipy>=1.16,<1.17 as setup.py requires, or use "
            "method='adams', 'dopri5', 'bosh3', 'rkf23' or 'rk4'.", method=method)


_scipy_blas = None


def _scipy_blas_single_threaded():
    """threadpoolctl's limit on scipy's own BLAS (a no-op where scipy has none of its own)."""
    global _scipy_blas
    if _scipy_blas is None:
        from threadpoolctl import ThreadpoolController
        controller = ThreadpoolController()
        paths = [lib["filepath"] for lib in controller.info()
                 if lib["user_api"] == "blas" and "scipy" in lib["filepath"]
                 and "numpy" not in lib["filepath"]]
        _scipy_blas = controller.select(filepath=paths)
    return _scipy_blas.limit(limits=1)


_lock = threading.RLock()  # odeint's right to run VODE/LSODA; an RLock, which knows its owner


class _SolverLock(_thread.RLock):
    """scipy's lock around each run of one of its compiled solvers (scipy 1.16), which knows the
    thread that holds it. A solve by that solver started on the holding thread, in the dynamics
    of the running one, raises NestedSolveError instead of waiting forever, either way round
    (scipy's inside odeint's, odeint's inside scipy's). odeint holds it for the whole of its
    solve (`_take`), letting the runs of its own integrator through: any other run of the solver
    between its steps waits (on another thread) or is refused (on its own, a signal handler's),
    so odeint's state in the solver's global variables is intact. An RLock: its owner and its
    __exit__ live in C, so that an interrupt cannot leave a run of scipy's holding it (odeint's
    solve lets go in a `finally` of its own frame)."""

    def __init__(self, name, calls, other):
        super().__init__()
        self.name, self.calls, self.other = name, calls, other
        self.own = None  # the integrator of the odeint solve holding it

    def refuse(self, method=None):
        raise NestedSolveError(
            f"scipy's {self.name} ({self.calls}) was started inside the dynamics of another "
            f"solve by {self.name} on this thread, which holds scipy's lock on {self.name} while "
            "it runs: the inner solve would wait forever. Nest different solvers: odeint's "
            f"method= (or adjoint_method=) {self.other}, 'dopri5', 'bosh3', 'rkf23' or 'rk4', or "
            "another of scipy's.", method=method)

    def __enter__(self):  # scipy's, around one run (in scipy's IntegratorBase.run)
        integrator = sys._getframe(1).f_locals.get("self")
        own = integrator is not None and integrator is self.own
        if self._is_owned() and not own:
            self.refuse()
        try:
            self.acquire()  # a second count where it is odeint's own run: __exit__ takes it
            if not own:
                _check_handle(integrator)
        except BaseException:  # an interrupt as well: what a run of scipy's took, it gives back
            if not own:  # (odeint's solve, which this ends, lets go of its own counts)
                try:
                    _release_held(self)
                finally:  # again, where an interrupt cut the first short
                    _release_held(self)
            raise
        return self


def _release_held(lock):
    """Let go of every count this thread holds on `lock` (an RLock); none held, nothing done."""
    while lock._is_owned():
        lock.release()


def _check_handle(integrator):
    """scipy checks an integrator's handle on the solver's global state before it takes the lock,
    so a run that waited there may find the state another solve's (an odeint solve ran while it
    waited). A run that goes on from its integrator's last raises scipy's
    IntegratorConcurrencyError, as it would have had it checked later; a first run (istate 1)
    sets the state up afresh, and takes the handle back."""
    if (not isinstance(integrator, _ode.IntegratorBase)
            or integrator.handle is type(integrator).active_global_handle):
        return
    if integrator.call_args[3] != 1:
        raise _ode.IntegratorConcurrencyError(type(integrator).__name__)
    integrator.acquire_new_handle()


_LOCKS = {}  # odeint's method: the _SolverLock of the scipy solver it runs (none on scipy 1.17)
for _name, _methods, _solver, _calls, _other in (
        ("VODE_LOCK", ("adams", "bdf"), "VODE", "ode's 'vode' or 'zvode', odeint's 'adams' or "
         "'bdf'", "'lsoda'"),
        ("LSODA_LOCK", ("lsoda",), "LSODA", "solve_ivp's 'LSODA', ode's 'lsoda', odeint's "
         "'lsoda'", "'adams', 'bdf'")):
    _found = getattr(_ode, _name, None)  # scipy 1.16's names; scipy 1.17 nests without locks
    if _found is not None:
        if not hasattr(_found, "own"):  # not wrapped yet
            _found = _SolverLock(_solver, _calls, _other)
            setattr(_ode, _name, _found)
        _LOCKS.update(dict.fromkeys(_methods, _found))


def _free_in_child():
    """A forked child has only the thread that forked: a lock that another thread held (its
    solve under way) would be held for good. Such locks are made anew; the forking thread's
    own (a fork in the dynamics) stay held, for its solve to let go."""
    for lock in dict.fromkeys((_lock, *_LOCKS.values())):  # each once
        if lock._is_owned():
            continue
        if lock.acquire(blocking=False):
            lock.release()
        else:
            lock._at_fork_reinit()
        if isinstance(lock, _SolverLock):
            lock.own = None


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_free_in_child)


def _refuse_nested(method):
    """Refuse a solve by `method` started inside the dynamics of one it cannot nest in, before it
    takes anything (scipy's handle on the solver's state, a lock)."""
    if _lock._is_owned():
        raise NestedSolveError(
            f"method={method!r} was called from inside the dynamics of another odeint solve that "
            "uses scipy's VODE/LSODA. Those solvers keep global state and cannot be nested; give "
            "the inner odeint method='dopri5', 'bosh3', 'rkf23' or 'rk4' (pure Python, "
            "re-entrant).",
            method=method)
    if method in _LOCKS and _LOCKS[method]._is_owned():
        _LOCKS[method].refuse(method)


def _take(method, integrator):
    """Take scipy's lock on the solver that `method` runs and odeint's own (the one right to run
    VODE/LSODA, see the module docstring), for the whole of a solve by scipy's `integrator`.
    Never waits for the second holding the first: a thread holding the second may want the
    first in its dynamics (VODE inside 'lsoda'), and one in scipy's solve holds the first and may
    want the second (odeint in its dynamics). Once the first is held, `integrator` takes scipy's
    handle on the solver's state: another integrator part-way through a solve then fails loudly
    at its next run (IntegratorConcurrencyError) instead of going on from the state this solve
    leaves; this one, holding the lock throughout, needs no check of its own. The caller lets go
    with `_let_go`, in a `finally` of its own frame, whatever this got to."""
    scipy_lock = _LOCKS.get(method)
    while True:
        if scipy_lock is not None:
            scipy_lock.acquire()
        if _lock.acquire(blocking=False):
            if scipy_lock is not None:
                integrator.acquire_new_handle()
                integrator.initialized, integrator.check_handle = True, lambda: None
                scipy_lock.own = integrator
            return
        if scipy_lock is not None:
            scipy_lock.release()
        with _lock:  # wait for the solve that holds it, holding nothing
            pass


def _let_go(method, catch=None):
    """Undo what `_take` and `redirect` did for this thread, and return the solvers' message
    lines caught in `catch` (collected under odeint's lock: descriptor 1 is process-wide). Each
    step repeats safely, so that a second call completes a first that an interrupt (Ctrl-C) cut
    short; the locks are let go once descriptor 1 is back, or cannot be put back."""
    scipy_lock, caught = _LOCKS.get(method), []
    try:
        restore()
        if _lock._is_owned():
            caught = collect(catch)
    finally:
        if not redirected_here():  # else held until descriptor 1 is back (by the second call)
            if scipy_lock is not None and scipy_lock._is_owned():
                scipy_lock.own = None
                _release_held(scipy_lock)
            _release_held(_lock)
    return caught


def _quoted(messages):
    """The solver's printed lines, for an error message."""
    text = " / ".join(line for line in dict.fromkeys(messages) if line)  # each line once
    if len(text) > 600:
        text = text[:600] + " ..."
    return f" (the solver printed: {text})" if text else ""


class _Guarded:
    """The dynamics as the compiled solver sees them: counted, checked, never raising."""

    def __init__(self, fun, size, counts):
        self.fun, self.zeros, self.counts, self.error = fun, np.zeros(size), counts, None

    def __call__(self, y, t):
        if self.error is not None:
            return self.zeros
        self.counts.nfe += 1
        try:
            f = self.fun(y, t)
            if not all_finite(f):
                raise ODESolverError(f"the dynamics returned non-finite values (evaluation "
                                     f"{self.counts.nfe}); the solution may blow up before this "
                                     "time", t=float(t))
            return f
        except BaseException as e:  # noqa: BLE001 -- re-raised by `check` after the solve
            self.error = e
            return self.zeros

    def check(self, method):
        if self.error is not None:
            if isinstance(self.error, ODESolverError) and self.error.method is None:
                self.error.method = method
            raise self.error


def _integrator(guarded, y0, t0, t_end, method, rtol, atol, max_steps, jacobian):
    """scipy's `ode` set up for `method`: VODE's Adams (no Jacobian) or BDF, or LSODA; the stiff
    methods with a dense or a diagonal finite-difference Jacobian (the only ones that scale to
    large states). It never steps past t_end, where the dynamics may not be defined (a forcing
    known on the span only; an adjoint interval's start): the solvers' ITASK 4 with TCRIT =
    RWORK(1) = t_end, where scipy's `ode` runs ITASK 1, which steps past the output time and
    interpolates back."""
    if jacobian is None:
        jacobian = "dense" if y0.size <= DENSE_JACOBIAN_MAX else "diagonal"
    diagonal = dict(lband=0, uband=0) if jacobian == "diagonal" else {}
    options = dict(rtol=rtol, atol=atol, nsteps=max_steps)
    if method == "adams":
        options.update(method="adams", with_jacobian=False)
    elif method == "bdf":
        options.update(method="bdf", with_jacobian=True, **diagonal)
    else:
        options.update(diagonal)
    solver = ode(lambda tt, y: guarded(y, tt))
    solver.set_integrator(SCIPY_INTEGRATORS[method], **options)
    solver.set_initial_value(y0, t0)  # makes call_args (rtol, atol, ITASK, ISTATE, RWORK, ...)
    solver._integrator.call_args[2] = 4
    solver._integrator.rwork[0] = t_end
    return solver


def _steps_taken(solver):
    """The number of steps the solver took. scipy's `ode` has no public accessor for it; VODE and
    LSODA both document it as their optional output IWORK(11), which scipy keeps in the private
    `_integrator.iwork`."""
    return int(solver._integrator.iwork[10])


def _internal(solver):
    """The solver's last step size and internal time: RWORK(11) and (13) in both VODE and LSODA
    (optional outputs, kept in the private `_integrator.rwork`). A success is one only if the
    solver stepped to or past the output time (it interpolates there): LSODA returned y0 after a
    step of size 0 at rates near 1e150, VODE an extrapolation far beyond its last step."""
    return float(solver._integrator.rwork[10]), float(solver._integrator.rwork[12])


def _illegal_input(method, y0, t, rtol, atol):
    """Why VODE/LSODA refused their input (istate -3), once odeint's own checks have passed."""
    weight = rtol * np.abs(y0) + atol
    vanishing = weight < np.finfo(float).tiny
    if np.any(vanishing):
        return (f"component {int(np.argmax(vanishing))} of the state is zero (or subnormal) at "
                "the start and its atol is 0, so its error weight rtol * |y| + atol vanishes, "
                f"which VODE/LSODA refuse: {GIVE_ATOL}")
    # VODE's test (an RMS norm) and LSODA's (a max norm, 100 times stricter; measured on y0 = 1,
    # atol = 0: VODE refuses rtol below eps, LSODA below 100 eps)
    ratio = np.abs(y0) / weight
    norm, most = ((np.max(ratio), 0.01) if method == "lsoda"
                  else (np.sqrt(np.mean(ratio ** 2)), 1.0))
    if np.finfo(float).eps * norm > 0.5 * most:
        return ("the tolerances ask for more accuracy than float64 holds for y0 (VODE/LSODA's "
                "'too much accuracy requested'): loosen rtol and atol")
    return (f"the solver refused its input (illegal input; its message below says why); with "
            f"odeint's own checks passed, the likely cause is a first output time too close to "
            f"the start for its step-size arithmetic (t[1] - t[0] = {t[1] - t[0]:.3g})")


def _step(solver, guarded, method, y0, t, rtol, atol, max_steps, ys, counts):
    """Step scipy's `solver` through the output times t[1:], filling ys; returns None, or the
    failure (why, the time reached)."""
    failure = None
    with _scipy_blas_single_threaded():
        steps = 0
        for i in range(1, len(t)):
            ys[i] = solver.integrate(t[i])
            if guarded.error is not None:
                break
            if not solver.successful():
                code = solver.get_return_code()
                # -8: LSODA's answer to illegal input after five of them in a row
                reason = (_illegal_input(method, y0, t, rtol, atol) if code in (-3, -8) else
                          _ISTATE_MESSAGES.get(code, f"the solver returned istate = {code}")
                          .format(max_steps=max_steps))
                failure = reason, float(solver.t)
                break
            last_step, now = _internal(solver)
            # at t_end (TCRIT) the solver's time may fall short by roundoff (its own test)
            reached = 100 * np.finfo(float).eps * (abs(now) + abs(last_step))
            if last_step == 0 or (now - t[i]) * np.sign(t[-1] - t[0]) < -reached:
                failure = (
                    f"{method} reported success at t = {float(t[i])!r} without stepping there "
                    f"(its internal time reached {now!r}, its last step {last_step!r}): the "
                    f"interval from {float(t[i - 1])!r} is too short for its step-size "
                    "arithmetic (merge the two times), or the dynamics' rates (|f| / |y|) too "
                    "large (rescale time)", now)
                break
            steps = _steps_taken(solver)
        # after the dynamics raised, the solver stepped on through the zeros fed to it: only
        # the steps to the last output time before are known to be real
        counts.steps += steps if guarded.error is not None else _steps_taken(solver)
    return failure


def solve(fun, y0, t, method, rtol, atol, max_steps, counts, jacobian=None):
    """Solve dy/dt = fun(y, t) for a 1-D float64 y0, returning ys: ys[i] is the state at t[i]
    (t strictly monotonic). rtol and atol are scalars or arrays of y0's size; `counts` (a Counts)
    receives the evaluations and steps, of a failed solve too. Raises ODESolverError when the
    solver fails (its `t` the time the solver reached), and re-raises whatever `fun` raised.
    """
    refuse_broken(method)
    _refuse_nested(method)
    guarded, failure = _Guarded(fun, y0.size, counts), None
    ys = np.empty((len(t), y0.size))
    ys[0] = y0
    # Overflow and nan in the dynamics are reported by _Guarded as an error, not a numpy warning.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # scipy reports failures as warnings; they become exceptions below.
        warnings.filterwarnings("ignore", message="(vode|lsoda):")
        solver = _integrator(guarded, y0, t[0], t[-1], method, rtol, atol, max_steps, jacobian)
        # the locks and descriptor 1 are let go in this frame's `finally`, twice over: no pause of
        # Python's between taking and letting go (an interrupt's) can skip it
        catch = None
        try:
            _take(method, solver._integrator)
            catch = redirect()
            failure = _step(solver, guarded, method, y0, t, rtol, atol, max_steps, ys, counts)
        finally:
            try:
                printed = _let_go(method, catch)
            finally:  # again: an interrupt may have cut the first short
                _let_go(method, catch)
    guarded.check(method)
    if failure is not None:  # (why, the time reached), the solver's printed lines quoted
        reason, reached = failure
        raise ODESolverError(reason + _quoted(printed), t=reached, method=method)
    with np.errstate(over="ignore"):  # as in the solve: all_finite's sum may overflow
        finite = all_finite(ys)
    if not finite:
        first = int(np.nonzero(~np.isfinite(ys).all(axis=1))[0][0])
        raise ODESolverError("the solution became non-finite", t=float(t[first]), method=method)
    return ys
