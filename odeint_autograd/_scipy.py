"""The forward solve through scipy's compiled ODE solvers (VODE and LSODA).

Plain numpy in, plain numpy out: the states at every requested time, with the counts of what the
solver did. Three properties of scipy's solvers shape this file:

- A Python exception raised inside the dynamics cannot unwind scipy's C VODE (it keeps calling
  back with the error set and returns garbage). So the dynamics run inside `_Guarded`, which keeps
  the first exception, feeds the solver zeros so that it finishes quickly, and the exception is
  raised once the solver has returned.
- VODE and LSODA keep their state in process-wide variables: a solve started from inside the
  dynamics of another corrupts the outer one. `_exclusive` refuses such nested solves with a clear
  error (and serialises solves from different threads).
- The solvers' own vector operations go through the OpenBLAS bundled with scipy's wheels, whose
  threads keep spinning after each call and take cores from the dynamics' own threads
  (TensorFlow's: `benchmarks/tf_overhead.py` with and without `--scipy-blas-unlimited`).
  `_scipy_blas_single_threaded` limits that library, and only that one (numpy's, used by the
  dynamics, is a separate library), while scipy solves.
"""
import threading
import warnings
from contextlib import contextmanager

import numpy as np
from scipy.integrate import ODEintWarning, ode, odeint as _lsoda

# States above this size get a diagonal finite-difference Jacobian in the stiff methods instead of
# a dense one: LSODA and BDF would otherwise allocate n x n doubles (1.3 TB at n = 400,000).
DENSE_JACOBIAN_MAX = 1000

_ISTATE_MESSAGES = {
    -1: "too many steps: more than max_steps={max_steps} internal steps between two output times "
        "(the solution may blow up near this time; if not, raise max_steps, loosen the "
        "tolerances, or try method='bdf' if the problem is stiff)",
    -2: "excess accuracy requested: the tolerances are too small for float64",
    -3: "illegal input detected by the solver",
    -4: "repeated error test failures (step size underflow: the solution may blow up or the "
        "dynamics may be discontinuous)",
    -5: "repeated convergence failures of the corrector (step size underflow; for a stiff "
        "problem try method='bdf' or 'lsoda')",
    -6: "an error weight became zero (a component vanished while atol = 0)",
}


class ODESolverError(RuntimeError):
    """A solve failed. `t` is the time the solver reached, `method` the solver that failed."""

    def __init__(self, reason, t=None, method=None):
        super().__init__(reason)
        self.reason, self.t, self.method = reason, t, method

    def __str__(self):
        solver = f" ({self.method})" if self.method else ""
        where = "" if self.t is None else f" at t = {self.t!r}"
        return f"odeint{solver} failed{where}: {self.reason}"


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


_lock = threading.Lock()
_owner = None


@contextmanager
def _exclusive(method):
    """Hold the one process-wide right to run VODE/LSODA (see the module docstring)."""
    global _owner
    if _owner == threading.get_ident():
        raise ODESolverError(
            f"method={method!r} was called from inside the dynamics of another odeint solve that "
            "uses scipy's VODE/LSODA. Those solvers keep global state and cannot be nested; give "
            "the inner odeint method='dopri5', 'bosh3', 'rkf23' or 'rk4' (pure Python, "
            "re-entrant).",
            method=method)
    with _lock:
        _owner = threading.get_ident()
        try:
            yield
        finally:
            _owner = None


def _all_finite(f):
    """Whether a float array holds no nan or inf: its sum is nan or inf if any entry is (or if it
    overflows, when the entry-wise check decides). One pass and no boolean array, and no BLAS:
    a BLAS dot would wake numpy's OpenBLAS threads, whose spinning after the call takes a core
    from the dynamics' own threads (TensorFlow's: see the module docstring)."""
    return bool(np.isfinite(np.sum(f)) or np.isfinite(f).all())


class _Guarded:
    """The dynamics as the compiled solver sees them: counted, checked, never raising."""

    def __init__(self, fun, size):
        self.fun, self.zeros = fun, np.zeros(size)
        self.nfe, self.error = 0, None

    def __call__(self, y, t):
        if self.error is not None:
            return self.zeros
        self.nfe += 1
        try:
            f = self.fun(y, t)
            if not _all_finite(f):
                raise ODESolverError(f"the dynamics returned non-finite values (evaluation "
                                     f"{self.nfe}); the solution may blow up before this time",
                                     t=float(t))
            return f
        except BaseException as e:  # noqa: BLE001 -- re-raised by `check` after the solve
            self.error = e
            return self.zeros

    def check(self, method):
        if self.error is not None:
            if isinstance(self.error, ODESolverError) and self.error.method is None:
                self.error.method = method
            raise self.error


def _stiff_options(method, size, jacobian):
    """dense or diagonal finite-difference Jacobian (the only ones that scale to large states)."""
    if jacobian is None:
        jacobian = "dense" if size <= DENSE_JACOBIAN_MAX else "diagonal"
    if jacobian not in ("dense", "diagonal"):
        raise ValueError(f"jacobian must be None, 'dense' or 'diagonal', not {jacobian!r}")
    return jacobian


def solve(fun, y0, t, method, rtol, atol, max_steps, jacobian=None):
    """Solve dy/dt = fun(y, t) for a 1-D float64 y0, returning (ys, nfe, steps).

    ys[i] is the state at t[i] (t strictly monotonic); rtol and atol are scalars or arrays of
    y0's size. Raises ODESolverError when the solver fails, and re-raises whatever `fun` raised.
    """
    guarded = _Guarded(fun, y0.size)
    # Overflow and nan in the dynamics are reported by _Guarded as an error, not a numpy warning.
    with _exclusive(method), _scipy_blas_single_threaded(), warnings.catch_warnings(), \
            np.errstate(all="ignore"):
        # scipy reports failures as warnings; they become exceptions below.
        warnings.filterwarnings("ignore", message="vode:")
        warnings.filterwarnings("ignore", category=ODEintWarning)
        if method == "lsoda":
            ys, nst, code, t_reached = _solve_lsoda(guarded, y0, t, rtol, atol, max_steps, jacobian)
        else:
            ys, nst, code, t_reached = _solve_vode(guarded, y0, t, method, rtol, atol, max_steps,
                                                   jacobian)
    guarded.check(method)
    if code is not None:
        raise ODESolverError(code, t=t_reached, method=method)
    if not np.all(np.isfinite(ys)):
        raise ODESolverError("the solution became non-finite", t=float(t[-1]), method=method)
    return ys, guarded.nfe, nst


def _solve_vode(guarded, y0, t, method, rtol, atol, max_steps, jacobian):
    options = dict(method="adams", with_jacobian=False)
    if method == "bdf":
        options = dict(method="bdf", with_jacobian=True)
        if _stiff_options(method, y0.size, jacobian) == "diagonal":
            options.update(lband=0, uband=0)
    solver = ode(lambda tt, y: guarded(y, tt))
    solver.set_integrator("vode", rtol=rtol, atol=atol, nsteps=max_steps, **options)
    solver.set_initial_value(y0, t[0])
    ys = np.empty((len(t), y0.size))
    ys[0] = y0
    for i in range(1, len(t)):
        ys[i] = solver.integrate(t[i])
        if guarded.error is not None:
            return ys, None, None, None
        if not solver.successful():
            code = solver.get_return_code()
            message = _ISTATE_MESSAGES.get(code, f"VODE returned istate = {code}")
            return ys, None, message.format(max_steps=max_steps), float(solver.t)
    return ys, int(solver._integrator.iwork[10]), None, None


def _solve_lsoda(guarded, y0, t, rtol, atol, max_steps, jacobian):
    bands = {}
    if _stiff_options("lsoda", y0.size, jacobian) == "diagonal":
        bands = dict(ml=0, mu=0)
    ys, info = _lsoda(guarded, y0, t, rtol=rtol, atol=atol, mxstep=max_steps, full_output=True,
                      **bands)
    if guarded.error is not None:
        return ys, None, None, None
    if info["message"] != "Integration successful.":
        reached = np.nonzero(info["tcur"])[0]
        t_reached = float(info["tcur"][reached[-1]]) if reached.size else float(t[0])
        message = info["message"]
        if "Excess work" in message:
            message = _ISTATE_MESSAGES[-1].format(max_steps=max_steps)
        return ys, None, f"{message} (LSODA: {info['message']})", t_reached
    return ys, int(info["nst"][-1]), None, None
