"""The two flows of Section 4: planar normalizing flows (eq. 7) and planar continuous normalizing
flows (eq. 9-10 with a hypernetwork and gates), as plain functions of parameter dicts.

Both are written in autograd.numpy so that gradients (and the tests' Jacobians) come from autograd.
Shapes: points are (batch, 2); log-densities are (batch,).
"""
import autograd.numpy as anp
import numpy as np
from autograd.extend import defvjp_argnums, primitive
from autograd.tracer import getval

from odeint_autograd import odeint
from reproduce.common import LOG_2PI

DIM = 2


def check_points(z, name="z"):
    """Points must be a (batch, 2) array of finite numbers: ValueError otherwise."""
    shape = np.shape(getval(z))
    if len(shape) != 2 or shape[1] != DIM or shape[0] == 0:
        raise ValueError(f"{name} must be an array of 2-D points of shape (batch, 2), not {shape}")
    if not np.all(np.isfinite(getval(z))):
        raise ValueError(f"{name} has non-finite entries")
    return z


def _check_size(n, what):
    if not (isinstance(n, (int, np.integer)) and n > 0):
        raise ValueError(f"the number of {what} must be a positive integer, not {n!r}")


def log_normal(z):
    """log N(z; 0, I) of each row of z: the base density of both flows."""
    return -0.5 * anp.sum(z ** 2, axis=1) - 0.5 * DIM * LOG_2PI


# ---------------------------------------------------------------------------------------------
# Planar normalizing flow (Rezende and Mohamed 2015): z' = z + u_hat h(w^T z + b), h = tanh.


def init_planar(rng, n_layers, scale=0.1):
    """K planar layers: u, w (K, 2) and b (K,), small random values (near the identity map)."""
    _check_size(n_layers, "layers")
    return {"u": scale * rng.randn(n_layers, DIM), "w": scale * rng.randn(n_layers, DIM),
            "b": np.zeros(n_layers)}


def constrained_u(u, w):
    """Rezende and Mohamed's u_hat = u + (m(w^T u) - w^T u) w / |w|^2 with m(x) = -1 + softplus(x):
    then w^T u_hat = m(w^T u) > -1, which makes every layer invertible. Rows are layers."""
    wu = anp.sum(w * u, axis=1, keepdims=True)
    m = -1.0 + anp.logaddexp(0.0, wu)
    return u + (m - wu) * w / (anp.sum(w ** 2, axis=1, keepdims=True) + 1e-12)


def planar_forward(params, z):
    """z pushed through every layer in order: (z_K, sum_k log|det dz_k/dz_{k-1}|) by eq. 7,
    log|1 + u_hat^T h'(w^T z + b) w| (positive inside the absolute value, by the constraint)."""
    check_points(z)
    u_hat = constrained_u(params["u"], params["w"])
    args = (u_hat, params["w"], params["b"], z)
    out = _planar_chain(*args, tape=_chain(*(np.asarray(getval(a)) for a in args)))
    return out[:, :DIM], out[:, DIM]


def _chain(u_hat, w, b, z):
    """The layers in plain numpy: [z_K, log-det] (batch, 3), and each layer's input and tanh."""
    logdet, inputs, hs = np.zeros(len(z)), [], []
    for k in range(len(w)):
        h = np.tanh(z @ w[k] + b[k])
        inputs.append(z)
        hs.append(h)
        z = z + h[:, None] * u_hat[k]
        logdet += np.log(np.abs(1.0 + (1.0 - h ** 2) * (w[k] @ u_hat[k])))
    return np.concatenate([z, logdet[:, None]], axis=1), inputs, hs


@primitive
def _planar_chain(u_hat, w, b, z, tape):
    """All K layers as one autograd primitive with a hand-written VJP (the flow is run 500,000
    times in Figure 4, and tracing ~15 autograd operations per layer costs ~8x more). `tape` is
    `_chain`'s result for these arguments: the forward pass, kept for the VJP."""
    return tape[0]


def _planar_chain_vjp(argnums, ans, args, kwargs):
    u_hat, w, b, z = args
    _, inputs, hs = kwargs["tape"]

    def vjp(g):
        g_z, g_logdet = g[:, :DIM], g[:, DIM]
        g_u, g_w, g_b = np.zeros_like(u_hat), np.zeros_like(w), np.zeros_like(b)
        for k in reversed(range(len(w))):
            h, c = hs[k], w[k] @ u_hat[k]
            dh = 1.0 - h ** 2
            s = 1.0 + dh * c                      # the layer's Jacobian determinant
            g_a = (g_z @ u_hat[k] - 2.0 * h * c * g_logdet / s) * dh
            g_c = np.sum(g_logdet * dh / s)       # through c = w^T u_hat in the determinant
            g_u[k] = h @ g_z + g_c * w[k]
            g_w[k] = g_a @ inputs[k] + g_c * u_hat[k]
            g_b[k] = np.sum(g_a)
            g_z = g_z + g_a[:, None] * w[k]
        grads = (g_u, g_w, g_b, g_z)
        return tuple(grads[i] for i in argnums)

    return vjp


defvjp_argnums(_planar_chain, _planar_chain_vjp)


def planar_inverse(params, x, iters=60):
    """The inverse of `planar_forward` (numpy, not differentiated): each layer backwards, solving
    the scalar equation a + c tanh(a + b) = w^T x for a = w^T z (c = w^T u_hat > -1 makes its left
    side strictly increasing; |tanh| <= 1 brackets the root in [w^T x - |c|, w^T x + |c|]) by
    bisection, then z = x - u_hat tanh(a + b). Returns the base points."""
    check_points(x, "x")
    u_hat = np.asarray(constrained_u(params["u"], params["w"]))
    w, b = np.asarray(params["w"]), np.asarray(params["b"])
    for k in reversed(range(w.shape[0])):
        y, c = x @ w[k], w[k] @ u_hat[k]
        lo, hi = y - abs(c) - 1e-12, y + abs(c) + 1e-12
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            above = mid + c * np.tanh(mid + b[k]) > y
            hi, lo = np.where(above, mid, hi), np.where(above, lo, mid)
        x = x - np.tanh(0.5 * (lo + hi) + b[k])[:, None] * u_hat[k]
    return x


def planar_sample(params, z0):
    """Generative direction (Figure 4): base samples z0 -> (x, log q(x))."""
    x, logdet = planar_forward(params, z0)
    return x, log_normal(z0) - logdet


def planar_log_density_generative(params, x):
    """log q(x) of the generative flow of `planar_sample`, by inverting it (numpy)."""
    z0 = planar_inverse(params, x)
    _, logdet = planar_forward(params, z0)
    return np.asarray(log_normal(z0) - logdet)


def planar_log_density_normalizing(params, x):
    """Normalizing direction (Figure 6, maximum likelihood): log q(x) = log N(f(x)) + log|det|."""
    z, logdet = planar_forward(params, x)
    return log_normal(z) + logdet


# ---------------------------------------------------------------------------------------------
# Planar CNF: dz/dt = sum_n sigma_n(t) u_n(t) tanh(w_n(t)^T z + b_n(t)), with (u, w, b, gate
# logits) = hypernetwork(t), and d log p/dt = -tr(df/dz) = -sum_n sigma_n u_n^T w_n (1 - tanh^2)
# (eq. 28: linear in M). The ODE state is one (batch, 3) array: z, and the log-density change.

T_END = 1.0  # the flow runs over t in [0, T_END]


def init_cnf(rng, n_units, hidden=32):
    """Hypernetwork t -> tanh(a t + c) (`hidden` units) -> linear (V, d) -> per unit the
    parameters (w: 2, u: 2, b: 1, gate logit: 1), laid out [w | u | b | gate] over the M units.

    At the start w and b are of order 1 (hyperplanes spread over the data), u of order
    0.1 / sqrt(M) (a flow close to the identity whatever M), and the gate logits 0 (sigma = 1/2).
    """
    _check_size(n_units, "hidden units")
    _check_size(hidden, "hypernetwork units")
    m = n_units
    scale = np.repeat([1.0, 0.1 / np.sqrt(m), 1.0, 0.0], [2 * m, 2 * m, m, m])
    return {"a": rng.randn(hidden), "c": rng.randn(hidden),
            "V": rng.randn(hidden, 6 * m) * scale / np.sqrt(hidden), "d": rng.randn(6 * m) * scale}


def cnf_parameters(theta, t):
    """The flow's parameters at time t: w (M, 2), u (M, 2), b (M,), gate sigma (M,)."""
    hidden = anp.tanh(t * theta["a"] + theta["c"])
    p = anp.dot(hidden, theta["V"]) + theta["d"]
    m = np.shape(theta["d"])[0] // 6
    w = anp.reshape(p[:2 * m], (m, DIM))
    u = anp.reshape(p[2 * m:4 * m], (m, DIM))
    b, gate = p[4 * m:5 * m], 0.5 * (anp.tanh(0.5 * p[5 * m:]) + 1.0)  # logistic
    return w, u, b, gate


def cnf_dynamics(y, t, theta, eps=None):
    """d[z, delta log p]/dt for a (batch, 3) state. The trace is exact (eq. 28) when eps is None;
    with eps (batch, 2) it is Hutchinson's estimate eps^T (df/dz) eps (FFJORD), unbiased when
    E[eps eps^T] = I, also linear in M: sum_n sigma_n h_n' (eps^T u_n)(w_n^T eps)."""
    w, u, b, gate = cnf_parameters(theta, t)
    z = y[:, :DIM]
    h = anp.tanh(anp.dot(z, w.T) + b)                     # (batch, M)
    dz = anp.dot(h * gate, u)                             # (batch, 2)
    slope = (1.0 - h ** 2) * gate                         # sigma_n h'(w_n^T z + b_n)
    if eps is None:
        trace = anp.dot(slope, anp.sum(u * w, axis=1))
    else:
        trace = anp.sum(slope * anp.dot(eps, u.T) * anp.dot(eps, w.T), axis=1)
    return anp.concatenate([dz, -trace[:, None]], axis=1)


def cnf_flow(theta, z, times, eps=None, **solver):
    """Solve the augmented ODE from `z` at times[0] through `times` (increasing or decreasing) in
    one odeint call. Returns (points, delta): points (len(times), batch, 2) and delta
    (len(times), batch) with log p(z(t_i)) = log p(z(t_0)) + delta[i]."""
    check_points(z)
    if eps is not None and np.shape(eps) != np.shape(z):
        raise ValueError(f"eps must have the points' shape {np.shape(z)}, not {np.shape(eps)}")
    y0 = anp.concatenate([z, anp.zeros((anp.shape(z)[0], 1))], axis=1)
    args = (theta,) if eps is None else (theta, eps)
    ys = odeint(cnf_dynamics, y0, times, args=args, **solver)
    return ys[:, :, :DIM], ys[:, :, DIM]


def cnf_sample(theta, z0, eps=None, t_end=T_END, **solver):
    """Generative direction: base samples z0 at t = 0 -> (x at t_end, log q(x))."""
    points, delta = cnf_flow(theta, z0, np.array([0.0, t_end]), eps, **solver)
    return points[-1], log_normal(z0) + delta[-1]


def cnf_log_density(theta, x, eps=None, t_end=T_END, **solver):
    """log q(x) of the distribution at time t_end: x solved back to t = 0 (the normalizing
    direction used for maximum likelihood)."""
    points, delta = cnf_flow(theta, x, np.array([t_end, 0.0]), eps, **solver)
    return log_normal(points[-1]) - delta[-1]
