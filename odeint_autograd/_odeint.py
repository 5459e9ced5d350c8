"""The public `odeint`: checks its arguments, then hands the solve to the adjoint primitive (scipy's
solvers) or to the autograd Runge-Kutta solvers (direct backprop)."""
import dataclasses

import autograd.numpy as anp
import numpy as np
from autograd.builtins import SequenceBox
from autograd.tracer import getval, isbox

from . import rk
from ._scipy import refuse_broken
from .adjoint import Options, odeint_adjoint
from .errors import Counts, counting

ADJOINT_METHODS = ("adams", "bdf", "lsoda")  # scipy's VODE (Adams, BDF) and LSODA; adjoint VJP
ADAPTIVE_RK = tuple(rk.TABLEAUX)  # dopri5, bosh3: this package's own adaptive Runge-Kutta pairs
DIRECT_METHODS = ("rk4",) + ADAPTIVE_RK  # autograd operations; direct backprop
METHODS = ADJOINT_METHODS + DIRECT_METHODS
BACKWARD_METHODS = ADJOINT_METHODS + ADAPTIVE_RK  # what may solve the adjoint
DEFAULT_TOL = 1.49012e-8  # scipy.integrate.odeint's default rtol and atol
MAX_COUNT = np.iinfo(np.int32).max  # max_steps and checkpoints: VODE/LSODA's Fortran integers
MAX_CHECKPOINTS = 10 ** 6  # each holds a forward state
# the fewest ulps (np.spacing of the larger) between two times that a method steps across:
# measured, VODE and LSODA failed at 2 and the adaptive RK pairs at 16 (rk4 never)
MIN_ULPS = {"rk4": 0, "dopri5": 32, "bosh3": 32, "rkf23": 32}
MIN_ULPS_ADJOINT = 4
# the shortest and longest span of t the adaptive methods take: their step-size arithmetic squares
# rates and steps, and beyond about 1e-150 VODE and LSODA returned wrong answers without an error
# (measured on y' = -y / T over [0, T]); rk4 takes any span
SPAN_RANGE = (1e-100, 1e100)


@dataclasses.dataclass
class SolverStats:
    """Counts of the forward solves and of the backward (adjoint) solves, accumulated over calls.

    Pass one as ``odeint(..., stats=s)``; after the forward ``s.forward.nfe`` and
    ``s.forward.steps`` hold what the forward solve did, after a gradient ``s.backward`` holds the
    adjoint solves (their NFE counts evaluations of the augmented dynamics: one f and one VJP
    each). Direct-backprop methods (rk4 and the adaptive pairs) have no backward solve.
    ``s.reset()`` zeroes it.
    """

    forward: Counts = dataclasses.field(default_factory=Counts)
    backward: Counts = dataclasses.field(default_factory=Counts)

    def reset(self):
        self.forward, self.backward = Counts(), Counts()


def odeint(func, y0, t, args=(), *, rtol=None, atol=None, method="lsoda",
           max_steps=10_000, step_size=None, jacobian=None, adjoint_method=None,
           adjoint_rtol=None, adjoint_atol=None, adjoint_seminorm=False, checkpoints=None,
           stats=None):
    """Solve dy/dt = func(y, t, *args) from y(t[0]) = y0; differentiable with autograd.

    func(y, t, *args) returns dy/dt, real, with y's shape, and must be smooth in y and t: on a
    discontinuous one (a relay switching at a threshold) the solvers fail, or VODE's BDF returns
    a wrong solution without an error (measured): split the solve where func jumps. func may run
    scipy's solvers, and odeint may run inside theirs, except the solver odeint runs (LSODA under
    'lsoda', VODE under 'adams' and 'bdf', adjoint_method's in the backward solve), which cannot
    nest: that raises NestedSolveError (an ODESolverError) where scipy would wait forever, as
    does an odeint by VODE or LSODA inside another odeint by either. Other threads' runs of that
    solver wait while odeint solves (one part-way through a solve then raises scipy's
    IntegratorConcurrencyError, as between two of scipy's own); two threads that nest the two
    solvers in opposite orders wait on each other, as scipy's own do.
    y0 has any shape; t is 1-D, at least two strictly increasing or strictly decreasing times;
    every solve, forwards and in the adjoint, calls func only at times inside t's span. Returns
    an array (len(t),) + y0.shape whose first row is y0. Gradients (any order) flow to y0, every
    entry of t and every float array in `args` (a tuple; its entries may be arrays, scalars or
    nested lists/tuples/dicts/namedtuples of them). Values that func needs gradients for must
    come through `args`, not a closure.

    method: 'lsoda' (switches to BDF when stiff), 'adams' (VODE's implicit Adams without a
    Jacobian: the one for large states) or 'bdf' (VODE's BDF, for stiff problems), with gradients
    by the adjoint method (the paper's Algorithm 1); or 'rk4' (fixed steps of at most
    `step_size`, one per interval if None), 'dopri5' (Dormand-Prince 5(4)), 'bosh3'
    (Bogacki-Shampine 3(2)) or 'rkf23' (Fehlberg 2(3), propagated at order 3), with gradients by
    backprop through the solver's operations (the paper's RK-Net).
    rtol, atol: error tolerances (None: scipy's default, DEFAULT_TOL; refused with 'rk4', which
    controls no error). max_steps: the most steps between two output times. jacobian: for
    'bdf'/'lsoda', 'dense' or 'diagonal' finite differences (None: dense up to 1000 states,
    diagonal above, so that large states never get an n x n one; on strongly coupled stiff
    systems the diagonal one can miss the tolerance by orders of magnitude: pass 'dense').
    t's times must be resolvable by float64 to the tolerance over their span (times near 1e12
    spanning 1 are not: solve in t - t[0]), no two closer than the method can step across
    (MIN_ULPS: 4 ulps for VODE/LSODA, 32 for the adaptive RK pairs), and for the adaptive
    methods their span within SPAN_RANGE (1e-100 to 1e100: rescale time beyond).
    adjoint_method, adjoint_rtol, adjoint_atol: the backward solves (default: the forward's).
    adjoint_method may also be 'dopri5', 'bosh3' or 'rkf23' (in plain numpy there), which carry
    their step size from one output interval to the next where VODE and LSODA restart at order 1.
    adjoint_seminorm: leave the parameter-gradient integrals out of the backward error control.
    checkpoints: an int k (k extra times evenly spaced between t[0] and t[-1]) or an array of
    times at which the forward states are stored, so that the backward solve restarts z from
    them (curbs the error of reconstructing z backwards, the paper's Section 6).
    stats: a SolverStats that receives NFE and step counts (a failed solve's too; where func
    raised inside VODE/LSODA, the steps up to the last output time reached).

    A func may offer the backward solve a fused call (gpu_dynamics' primitives do):
    `func.value_and_vjp(g, y, t, *args) -> (f, g_y, g_t, g_args)`, f and the vector-Jacobian
    products g^T df/dy, g^T df/dt and g^T df/dargs (a tuple like args) from one call; else
    autograd traces func.

    Raises ValueError for bad arguments, and ODESolverError when a solve fails (saying whether the
    forward or an adjoint solve, and the time reached; quoting what VODE/LSODA printed, which
    odeint keeps off stdout), when z solved backwards ends farther from the forward solution at
    an output or checkpoint time than both adjoint.RECONSTRUCTION_LIMIT error weights and
    adjoint.RECONSTRUCTION_FRACTION of max|z| (the gradient would be wrong: pass checkpoints),
    or when the installed scipy is known to return wrong answers with the method; an exception
    raised by func propagates unchanged.
    """
    if not callable(func):
        raise ValueError(f"func must be callable, not {type(func).__name__}")
    if not (isinstance(method, str) and method in METHODS):
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if not (isinstance(args, (list, tuple)) or isinstance(args, SequenceBox)):
        raise ValueError(f"args must be a tuple of the extra arguments of func, not "
                         f"{type(args).__name__}: write args=(theta,) for a single one")
    y0, t = _check_y0(y0), _check_t(t)
    if method == "rk4" and (rtol is not None or atol is not None):
        raise ValueError("rtol and atol do not apply to method='rk4': it takes fixed steps "
                         "(step_size) and controls no error; choose an adaptive method for a "
                         "tolerance")
    rtol, atol = (DEFAULT_TOL if tol is None else tol for tol in (rtol, atol))
    _check_tolerances(rtol, atol, "rtol", "atol")
    _check_spacing(t, method)
    if method != "rk4":
        _check_span(t)
        _check_resolution(t, rtol, atol, "")
    elif _span(t) == np.inf:  # its step (t[i] - t[i-1]) / n would be inf, its times nan
        raise ValueError("t spans inf: the difference of its times overflows float64; rescale "
                         "time: solve in s = t / c, with dynamics c * func(y, s * c)")
    _check_count(max_steps, "max_steps")
    if step_size is not None and method != "rk4":
        raise ValueError(f"step_size applies to method='rk4' only, not {method!r}")
    if step_size is not None and not (_real(step_size) is not None and np.isfinite(step_size)
                                      and step_size > 0):
        raise ValueError(f"step_size must be a positive number, not {step_size!r}")
    if not isinstance(adjoint_seminorm, (bool, np.bool_)):
        raise ValueError(f"adjoint_seminorm must be True or False, not {adjoint_seminorm!r}")
    if stats is not None and not isinstance(stats, SolverStats):
        raise ValueError(f"stats must be a SolverStats or None, not {type(stats).__name__}")
    func = _check_output(func, anp.shape(y0))

    if method in DIRECT_METHODS:
        adjoint_only = dict(adjoint_method=adjoint_method, adjoint_rtol=adjoint_rtol,
                            adjoint_atol=adjoint_atol, checkpoints=checkpoints,
                            jacobian=jacobian, adjoint_seminorm=adjoint_seminorm or None)
        for name, value in adjoint_only.items():
            if value is not None:
                raise ValueError(f"{name} applies to the adjoint methods {ADJOINT_METHODS}; "
                                 f"method={method!r} backpropagates through its own steps")
        return _solve_direct(func, y0, t, args, method, rtol, atol, max_steps, step_size, stats)

    adjoint_method = method if adjoint_method is None else adjoint_method
    if not (isinstance(adjoint_method, str) and adjoint_method in BACKWARD_METHODS):
        raise ValueError(f"unknown adjoint_method {adjoint_method!r}; choose one of "
                         f"{', '.join(BACKWARD_METHODS)}")
    if adjoint_method != method:
        _check_spacing(t, adjoint_method)
    if not (jacobian is None or isinstance(jacobian, str) and jacobian in ("dense", "diagonal")):
        raise ValueError(f"jacobian must be None, 'dense' or 'diagonal', not {jacobian!r}")
    if jacobian is not None and not {method, adjoint_method} & {"bdf", "lsoda"}:
        raise ValueError(f"jacobian applies to 'bdf' and 'lsoda'; method={method!r} with "
                         f"adjoint_method={adjoint_method!r} uses no Jacobian")
    adjoint_rtol = rtol if adjoint_rtol is None else adjoint_rtol
    adjoint_atol = atol if adjoint_atol is None else adjoint_atol
    _check_tolerances(adjoint_rtol, adjoint_atol, "adjoint_rtol", "adjoint_atol")
    leaves, rebuild = _flatten(args)
    if isbox(y0) or isbox(t) or any(isbox(leaf) for leaf in leaves):  # a gradient
        _check_resolution(t, adjoint_rtol, adjoint_atol, "adjoint ")
    for name in {method, adjoint_method}:
        refuse_broken(name)
    backward = Options(adjoint_method, adjoint_rtol, adjoint_atol, max_steps, jacobian,
                       seminorm=bool(adjoint_seminorm))
    opts = Options(method, rtol, atol, max_steps, jacobian, backward=backward)
    if checkpoints is None:
        return _solve_adjoint(func, y0, t, leaves, rebuild, opts, stats)
    t_all, rows = _with_checkpoints(t, checkpoints, max(map(_min_ulps, (method, adjoint_method))))
    return _solve_adjoint(func, y0, t_all, leaves, rebuild, opts, stats)[rows]


def _solve_direct(func, y0, t, args, method, rtol, atol, max_steps, step_size, stats):
    """RK-Net: autograd records the solver's own operations (closures over traced values are
    fine here)."""
    fun = lambda y, tt: func(y, tt, *args)  # noqa: E731
    # non-finite values raise ODESolverError instead of numpy warnings
    with np.errstate(all="ignore"), counting(None if stats is None else stats.forward) as counts:
        if method == "rk4":
            return rk.rk4(fun, y0, t, step_size, max_steps, counts)
        return rk.embedded_rk(method, fun, y0, t, rtol, atol, max_steps, counts)[0]


def _solve_adjoint(func, y0, t, leaves, rebuild, opts, stats):
    """The adjoint primitive sees args (flattened by _flatten into leaves and rebuild) as a
    flat list of float arrays (its differentiable inputs); everything else in args (ints,
    strings, ...) stays inside the wrapped func."""
    floats = [i for i, leaf in enumerate(leaves) if _is_float(leaf)]
    for leaf in leaves:
        if isbox(leaf) and not _is_float(leaf):
            raise ValueError(f"args holds a value of dtype {np.asarray(getval(leaf)).dtype} "
                             "that autograd is differentiating; odeint differentiates real "
                             "float arrays only: pass a complex one as its real and imaginary "
                             "parts")

    def with_floats(values):
        full = list(leaves)
        for i, value in zip(floats, values):
            full[i] = value
        return rebuild(full)

    def flat_func(y, tt, *values):
        return func(y, tt, *with_floats(values))

    fused = getattr(func, "value_and_vjp", None)
    if fused is not None:
        def value_and_vjp(g, y, tt, *values):
            f, g_y, g_t, g_args = fused(g, y, tt, *with_floats(values))
            g_leaves, _ = _flatten(tuple(g_args))
            return (f, g_y, g_t) + tuple(g_leaves[i] for i in floats)
        flat_func.value_and_vjp = value_and_vjp

    return odeint_adjoint(y0, t, *[leaves[i] for i in floats], func=flat_func, opts=opts,
                          stats=stats)


def _traced_list_to_array(x):
    """A list or tuple holding values autograd traces, as one traced array (as np.array would
    make of untraced values); anything else unchanged."""
    if isinstance(x, (list, tuple)) and any(isbox(leaf) for leaf in _flatten(x)[0]):
        return anp.array(x)
    return x


def _as_array(x, name):
    """x as a numpy array, or a ValueError that names it (a ragged list, say)."""
    try:
        return np.asarray(getval(x))
    except ValueError as e:
        raise ValueError(f"{name} must be an array of real numbers ({e})") from None


def _check_y0(y0):
    y0 = _traced_list_to_array(y0)
    value = _as_array(y0, "y0")
    if value.dtype == object or not np.issubdtype(value.dtype, np.number) \
            or np.issubdtype(value.dtype, np.complexfloating):
        raise ValueError(f"y0 must be an array of real numbers, not {value.dtype}")
    if value.size == 0:
        raise ValueError("y0 is empty")
    if not np.all(np.isfinite(value)):
        raise ValueError("y0 has non-finite entries (nan or inf)")
    return _float64(y0, value)


def _float64(x, value):
    """x (value its array) in float64, traced or not: a traced float32 would run the autograd
    solvers in float32, short of their tolerance."""
    if not isbox(x):
        return value.astype(float)
    return x if value.dtype == np.float64 else x.astype(np.float64)


def _check_t(t):
    t = _traced_list_to_array(t)
    value = _as_array(t, "t")
    if value.ndim != 1:
        raise ValueError(f"t must be 1-D, not of shape {value.shape}")
    if value.size < 2:
        raise ValueError(f"t must hold at least two times (start and end), not {value.size}")
    if not np.issubdtype(value.dtype, np.number) or np.issubdtype(value.dtype,
                                                                   np.complexfloating):
        raise ValueError(f"t must hold real numbers, not {value.dtype}")
    if not np.all(np.isfinite(value)):
        raise ValueError("t has non-finite entries (nan or inf)")
    with np.errstate(over="ignore"):  # an overflowing difference is still a step
        steps = np.diff(value.astype(float))
    if np.any(steps == 0):
        raise ValueError(f"t repeats a time ({float(value[1:][steps == 0][0])!r}); times must be "
                         "strictly monotonic")
    if not (np.all(steps > 0) or np.all(steps < 0)):
        raise ValueError("t must be strictly increasing or strictly decreasing")
    return _float64(t, value)


def _ulps_apart(a, b):
    """|a - b| in units of the float64 spacing of the larger of |a| and |b|."""
    with np.errstate(over="ignore"):  # times of opposite signs near the float64 limit
        return np.abs(a - b) / np.spacing(np.maximum(np.abs(a), np.abs(b)))


def _min_ulps(method):
    """The fewest ulps between two times that `method` steps across (MIN_ULPS)."""
    return MIN_ULPS.get(method, MIN_ULPS_ADJOINT)


def _check_spacing(t, method):
    """Refuse consecutive times too close for `method` to step between (it failed there)."""
    tv, least = getval(t), _min_ulps(method)
    near = _ulps_apart(tv[:-1], tv[1:]) < least
    if np.any(near):
        i = int(np.argmax(near))
        raise ValueError(f"t holds {float(tv[i])!r} and {float(tv[i + 1])!r}, too close for "
                         f"method={method!r} to step between (fewer than {least} ulps apart): "
                         "merge them or space them further")


def _span(t):
    """|t[-1] - t[0]| (inf, without a warning, where it overflows)."""
    tv = getval(t)
    return abs(float(tv[-1]) - float(tv[0]))


def _check_span(t):
    """Refuse a span of t outside SPAN_RANGE (the adaptive solvers' arithmetic fails there)."""
    span = _span(t)
    if not SPAN_RANGE[0] <= span <= SPAN_RANGE[1]:
        raise ValueError(f"t spans {span:.3g}, outside the {SPAN_RANGE[0]:g} to "
                         f"{SPAN_RANGE[1]:g} that the adaptive methods' step-size arithmetic "
                         "handles in float64; rescale time: solve in s = t / c, with dynamics "
                         "c * func(y, s * c)")


def _check_resolution(t, rtol, atol, which):
    """Refuse times so large for their span that float64 cannot resolve a step to the tolerance
    (the solvers then print warnings and return wrong answers); `which` names the solve."""
    tv = getval(t)
    ulp, span = float(np.spacing(np.max(np.abs(tv)))), _span(t)
    tol = max(rtol if rtol > 0 else atol, 1e-14)  # below, the solvers' own error says it
    if ulp > tol * span:
        raise ValueError(f"t runs from {float(tv[0])!r} to {float(tv[-1])!r}: float64 resolves "
                         f"times that large only to {ulp:.2g}, {ulp / span:.2g} of the span, "
                         f"coarser than the {which}tolerance {tol:g}; solve in the shifted time "
                         f"s = t - t[0] (func given s + t[0])")


def _real(value):
    """value as a float if it is one real number (not a bool, a string or an array), else None."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or np.ndim(value) != 0 \
            or np.asarray(value).dtype.kind not in "iuf":
        return None
    return float(value)


def _check_tolerances(rtol, atol, rname, aname):
    for name, tol in ((rname, rtol), (aname, atol)):
        value = _real(tol)
        if value is None or not np.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite non-negative number, not {tol!r}")
    if rtol == 0 and atol == 0:
        raise ValueError(f"{rname} and {aname} cannot both be zero")


def _check_count(value, name):
    """A positive int that fits the solvers' 32-bit Fortran integers (not a bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or not 0 < value <= MAX_COUNT:
        raise ValueError(f"{name} must be a positive integer at most {MAX_COUNT}, not {value!r}")


def _check_output(func, shape):
    """func with a check that dy/dt comes back real, with y's shape."""

    def checked(y, t, *args):
        f = _traced_list_to_array(func(y, t, *args))
        value = f if isbox(f) else np.asarray(f)
        kind = np.asarray(getval(value)).dtype
        if kind == object or not np.issubdtype(kind, np.number) \
                or np.issubdtype(kind, np.complexfloating):
            raise ValueError(f"func returned dy/dt of dtype {kind}; it must be real (odeint "
                             "solves real ODEs: write a complex state as its real and imaginary "
                             "parts)")
        if not isbox(f):
            f = value.astype(float, copy=False)
        if anp.shape(f) != shape:
            raise ValueError(f"func returned dy/dt of shape {anp.shape(f)}; it must have y's "
                             f"shape {shape}")
        return f

    if hasattr(func, "value_and_vjp"):  # the adjoint's fused call
        checked.value_and_vjp = func.value_and_vjp
    return checked


def _is_float(leaf):
    value = getval(leaf)
    return isinstance(value, (float, np.floating, np.ndarray)) and \
        np.issubdtype(np.asarray(value).dtype, np.floating)


def _flatten(tree):
    """Leaves of nested lists/tuples/dicts (autograd's boxed containers included), and the
    function that rebuilds the same nesting around new leaves."""
    if isinstance(tree, (list, tuple)) or isinstance(tree, SequenceBox):
        parts = [_flatten(tree[i]) for i in range(len(tree))]
        value = getval(tree)
        if hasattr(value, "_fields"):  # a namedtuple: rebuilt as one, so func sees its fields
            kind = lambda values: type(value)(*values)  # noqa: E731
        else:
            kind = list if isinstance(value, list) else tuple
    elif isinstance(getval(tree), dict):
        keys = list(getval(tree).keys())
        parts = [_flatten(tree[k]) for k in keys]
        kind = lambda values: dict(zip(keys, values))  # noqa: E731
    else:
        return [tree], lambda leaves: leaves[0]
    counts = [len(leaves) for leaves, _ in parts]

    def rebuild(leaves):
        out, start = [], 0
        for (_, sub), count in zip(parts, counts):
            out.append(sub(leaves[start:start + count]))
            start += count
        return kind(out)

    return [leaf for leaves, _ in parts for leaf in leaves], rebuild


def _apart(extra, times, least):
    """The sorted checkpoint times `extra` at least `least` ulps from every output time (sorted
    `times`) and from the checkpoint before them: the solvers cannot step between closer
    neighbours (np.linspace's 0.30000000000000004 beside an output time 0.3)."""
    i = np.clip(np.searchsorted(times, extra), 1, len(times) - 1)
    apart = np.minimum(_ulps_apart(extra, times[i - 1]), _ulps_apart(extra, times[i]))
    extra = extra[apart >= least]
    return extra[np.concatenate([[True], _ulps_apart(extra[1:], extra[:-1]) >= least])
                 [:len(extra)]]


def _with_checkpoints(t, checkpoints, least):
    """The output times merged with checkpoint times (those at least `least` ulps from the
    others), and the rows of the outputs in the merge."""
    tv = getval(t)
    if np.ndim(checkpoints) == 0:
        _check_count(checkpoints, "checkpoints (a count, or an array of times)")
        if checkpoints > MAX_CHECKPOINTS:
            raise ValueError(f"checkpoints={checkpoints} would store as many forward states; "
                             f"at most {MAX_CHECKPOINTS}")
        extra = np.linspace(tv[0], tv[-1], int(checkpoints) + 2)[1:-1]
    else:
        extra = np.asarray(checkpoints)
        if extra.dtype.kind not in "iuf":
            raise ValueError(f"checkpoints must be a positive int or an array of times, not "
                             f"{checkpoints!r}")
        extra = extra.astype(float).ravel()
        lo, hi = min(tv[0], tv[-1]), max(tv[0], tv[-1])
        if not np.all(np.isfinite(extra)) or np.any((extra <= lo) | (extra >= hi)):
            raise ValueError(f"checkpoint times must lie strictly inside [{lo}, {hi}]")
    if extra.size > MAX_CHECKPOINTS:
        raise ValueError(f"{extra.size} checkpoint times; at most {MAX_CHECKPOINTS}")
    extra = _apart(np.unique(extra), np.sort(tv), least)
    order = np.argsort(np.concatenate([tv, extra]), kind="stable")
    if tv[-1] < tv[0]:
        order = order[::-1]
    rows = np.argsort(order)[:len(tv)]
    return anp.concatenate([t, extra])[order], rows
