"""Algorithm 1 of the paper, with the time gradients of its Appendix C, as an autograd primitive.

Forward: one scipy solve through all output times (`_scipy.solve`). Backward (the VJP): the
augmented state s = [z, a, a_theta, a_t] is solved backwards one output interval at a time,

    dz/dt = f(z, t, theta)
    da/dt = -a^T df/dz,    da_theta/dt = -a^T df/dtheta,    da_t/dt = -a^T df/dt,

starting each interval from the stored forward state z(t_i) and with the adjoint a bumped by
dL/dz(t_i); a z that reaches t_(i-1) far from the stored z(t_(i-1)) (a flow unstable
backwards) refuses the gradient. The output times get dL/dt_i = g_i^T f(z(t_i), t_i), and
dL/dt_0 = a_t(t_0) when a_t starts at -dL/dt_N and drops by dL/dt_i at every other output time.

The VJP is made of autograd operations, the backward solves being calls of this same primitive,
so it can be differentiated again (Hessians, Hessian-vector products).
"""
import dataclasses

import autograd.numpy as anp
import numpy as np
from autograd.extend import defvjp_argnums, primitive
from autograd.tracer import getval, isbox

from ._scipy import solve
from ._vjp import value_and_vjp
from .errors import ODESolverError, counting
from .rk import TABLEAUX, embedded_rk


@dataclasses.dataclass(frozen=True)
class Options:
    """How one solve is done (settings only); `backward` is how its adjoint solves are done
    (None: the same)."""

    method: str
    rtol: float
    atol: float
    max_steps: int
    jacobian: str = None
    backward: "Options" = None
    seminorm: bool = False
    controlled: int = None  # with seminorm: how many leading components the error control sees
    adjoint: bool = False  # a backward solve of the adjoint method (counted and reported so)

    def checked(self, size):
        """How many leading components of a state of `size` the error control sees."""
        return min(self.controlled, size) if self.seminorm and self.controlled else size

    def tolerances(self, size):
        """Scalar tolerances, or per-component ones that drop all but the first `checked`
        components from the solver's error norm (the other terms of the norm are unchanged)."""
        checked = self.checked(size)
        if checked == size:
            return self.rtol, self.atol
        rtol, atol = np.zeros(size), np.full(size, np.inf)
        rtol[:checked], atol[:checked] = self.rtol, self.atol
        return rtol, atol

    def for_adjoint(self, controlled):
        back = dataclasses.replace(self.backward or self, adjoint=True)
        return dataclasses.replace(back, backward=dataclasses.replace(back, seminorm=False),
                                   controlled=controlled)


class StepCarry:
    """The step size an adaptive Runge-Kutta adjoint carries from one output interval to the
    next. One backward pass (one call of the VJP) makes a fresh one, so that every pass gives
    the same result whatever ran before it."""

    h = None


@primitive
def odeint_adjoint(y0, t, *args, func, opts, stats=None, carry=None):
    """The states of dy/dt = func(y, t, *args) at every t: an array (len(t),) + y0.shape.

    stats: a SolverStats that receives the counts (into `backward` for an adjoint solve);
    carry: the StepCarry of the backward pass this solve belongs to."""
    shape = np.shape(y0)

    def fun(y, tt):
        f = func(y.reshape(shape), tt, *args)
        if isbox(f):
            raise ValueError(
                "func returned a value that autograd is tracing: it closes over an array being "
                "differentiated, which odeint cannot see and would silently give no gradient. "
                "Pass every such array through args: odeint(func, y0, t, args=(theta, ...)).")
        return np.ravel(f)  # may be float32 (gpu_dynamics' assembled derivative): widened later

    rtol, atol = opts.tolerances(np.size(y0))
    y0_flat, t_values = np.ravel(y0).astype(float), np.asarray(t, dtype=float)
    sink = None if stats is None else stats.backward if opts.adjoint else stats.forward
    try:
        with counting(sink) as counts:
            if opts.method in TABLEAUX:  # the project's own solvers: pure Python, re-entrant
                with np.errstate(all="ignore"):
                    ys, next_step = embedded_rk(
                        opts.method, fun, y0_flat, t_values, rtol, atol, opts.max_steps, counts,
                        carry.h if carry is not None else None)
                if carry is not None:
                    carry.h = next_step
            else:  # scipy's solvers copy f into their own float64 arrays
                ys = solve(fun, y0_flat, t_values, opts.method, rtol, atol, opts.max_steps,
                           counts, opts.jacobian)
    except ODESolverError as e:
        if opts.adjoint:
            e.solve = "adjoint"
        raise
    ys = ys.reshape((len(t),) + shape)
    ys[0] = y0
    return ys


def _augmented_dynamics(func, shape, want_t, wanted):
    """The dynamics of s = [z, a, a_theta, a_t]: a_theta holds the adjoints of the args numbered
    in `wanted` only (those being differentiated), a_t is there only when wanted."""
    n = int(np.prod(shape))
    if getattr(func, "value_and_vjp", None) is None:
        fused = None
    else:  # it gives every arg's VJP: keep the wanted ones
        def fused(g, z, t, *args):
            f, g_z, g_t, *g_args = func.value_and_vjp(g, z, t, *args)
            return (f, g_z, g_t) + tuple(g_args[k] for k in wanted)

    def aug(s, t, *args):
        if any(isbox(x) for x in (s, t) + args):
            return _augmented_step(anp, s, t, args, value_and_vjp_fn)
        ds = _augmented_step(np, s, t, args, fused or value_and_vjp_fn)  # plain numpy: faster
        if ds.shape != np.shape(s):
            raise ValueError(f"func.value_and_vjp's parts add up to {ds.size} numbers; the "
                             f"augmented state [z, a, a_args, a_t] has {np.size(s)}")
        return ds

    def value_and_vjp_fn(g, z, t, *args):
        wrt = (0, 1) + tuple(2 + k for k in wanted)
        f, grads = value_and_vjp(func, (z, t) + args, wrt, g)
        return (f, *grads)

    def _augmented_step(xp, s, t, args, fvjp):
        z, a = xp.reshape(s[:n], shape), xp.reshape(s[n:2 * n], shape)
        f, g_z, g_t, *g_args = fvjp(-a, z, t, *args)
        parts = [xp.ravel(f), xp.ravel(g_z)] + [xp.ravel(g) for g in g_args]
        if want_t:
            parts.append(xp.reshape(g_t, (1,)))
        return xp.concatenate(parts)

    return aug


# A state solved backwards to an output or checkpoint time is refused when it is both this many
# error weights (atol + rtol |z|, with the state's largest |z|) and this fraction of that |z|
# away from the forward solve's: within either, the gradient is as good as the tolerances or
# off by a small fraction; beyond both, the backward flow has amplified errors (it is unstable).
RECONSTRUCTION_LIMIT = 1e4
RECONSTRUCTION_FRACTION = 1e-3


def _check_reconstruction(z_back, z_forward, forward, backward, t_from, t_to):
    """Raise ODESolverError if z, solved backwards from t_from to t_to, ends far from the forward
    solve's z(t_to): the adjoint's Jacobians were then taken along a wrong path (a contracting,
    stiff flow is unstable backwards), and the gradient is wrong. forward and backward are the
    Options of the solve that made z_forward and of the one that made z_back; the components
    the forward solve's error control left out (seminorm) are not compared."""
    checked = forward.checked(np.size(z_forward))
    z_back, z_forward = (np.ravel(getval(z))[:checked] for z in (z_back, z_forward))
    scale = np.max(np.abs(z_forward), initial=0.0)
    weight = max(forward.atol, backward.atol) + max(forward.rtol, backward.rtol) * scale
    with np.errstate(all="ignore"):
        error = np.max(np.abs(z_back - z_forward), initial=0.0)
    if not (error <= RECONSTRUCTION_LIMIT * weight or error <= RECONSTRUCTION_FRACTION * scale):
        raise ODESolverError(
            f"solved in reverse from t = {float(getval(t_from))!r} to {float(getval(t_to))!r}, "
            f"the state ended {error:.3g} away from the forward solution ({error / weight:.3g} "
            f"error weights atol + rtol max|z|, {error / scale if scale else np.inf:.3g} of "
            f"max|z|; at most {RECONSTRUCTION_LIMIT:g} or {RECONSTRUCTION_FRACTION:g} allowed), "
            "so the adjoint followed a wrong path and the gradient would be wrong. The flow is "
            "unstable backwards (a stiff or strongly contracting problem): pass checkpoints=k "
            "to restart the backward solve from stored forward states k times more often",
            t=float(getval(t_to)), method=backward.method, solve="adjoint")


def _odeint_vjp(argnums, ys, inputs, kwargs):
    func, opts, stats = kwargs["func"], kwargs["opts"], kwargs.get("stats")
    y0, t, args = inputs[0], inputs[1], inputs[2:]
    shape, n = anp.shape(y0), anp.size(y0)
    want_t = 1 in argnums
    wanted = [k for k in range(len(args)) if 2 + k in argnums]  # untraced args get no adjoint
    sizes = [anp.size(args[k]) for k in wanted]
    want_args = bool(wanted)
    aug = _augmented_dynamics(func, shape, want_t, wanted)
    back_opts = opts.for_adjoint(controlled=2 * n)

    def vjp(g):
        carry = StepCarry()
        a = anp.ravel(g[-1])
        a_theta = anp.zeros(sum(sizes))
        a_t = 0.0
        dL_dt = [None] * len(t)
        for i in range(len(t) - 1, 0, -1):
            if want_t:
                dL_dt[i] = anp.sum(func(ys[i], t[i], *args) * g[i])
                a_t = a_t - dL_dt[i]
            s = anp.concatenate([anp.ravel(ys[i]), a]
                                + ([a_theta] if want_args else [])
                                + ([anp.reshape(a_t, (1,))] if want_t else []))
            s = odeint_adjoint(s, anp.stack([t[i], t[i - 1]]), *args, func=aug, opts=back_opts,
                               stats=stats, carry=carry)[1]
            _check_reconstruction(s[:n], ys[i - 1], opts, back_opts, t[i], t[i - 1])
            a = s[n:2 * n] + anp.ravel(g[i - 1])
            if want_args:
                a_theta = s[2 * n:2 * n + sum(sizes)]
            if want_t:
                a_t = s[-1]
        grads = {0: anp.reshape(a, shape)}
        if want_t:
            dL_dt[0] = a_t
            grads[1] = anp.stack([anp.reshape(d, ()) for d in dL_dt])
        offset = 0
        for k, size in zip(wanted, sizes):
            grads[2 + k] = anp.reshape(a_theta[offset:offset + size], anp.shape(args[k]))
            offset += size
        return tuple(grads[i] for i in argnums)

    return vjp


defvjp_argnums(odeint_adjoint, _odeint_vjp)
