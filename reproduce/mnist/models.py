"""The four Table 1 models as functions of parameter pytrees, and their training loss.

    model = make_model("odenet")
    params = model.init(np.random.RandomState(0))
    logits = model.logits(params, x)            # x: (N, 28, 28, 1) float64 in [0, 1]

ResNet, RK-Net and ODE-Net share the downsampling and the head (TensorFlow primitives from
`gpu_dynamics.layers`) and differ only in what maps the (N, 6, 6, 64) features forward:

    resnet   6 pre-activation residual blocks (TensorFlow), backprop through each: O(L) memory
    odenet   odeint(dynamics, h, [0, 1]), VODE Adams rtol = atol = 1e-3, adjoint gradients: O(1)
    rknet    the same dynamics and tolerances, adaptive Dormand-Prince (dopri5) whose every stage
             autograd records and backpropagates through: O(L~) memory, L~ = NFE
    mlp      784-300-10 with ReLU, in autograd numpy (LeCun et al. 1998's 1-layer network)

Counts per training step (`counts_since`): forward NFE (dynamics evaluations of the forward
solve; for the ResNet its L blocks) and backward NFE (evaluations of the dynamics' VJP: the
adjoint solve's augmented-dynamics evaluations for ODE-Net, one per recorded stage for RK-Net).
"""
import functools

import autograd.numpy as anp
import numpy as np
from autograd.misc import flatten
from autograd.scipy.special import logsumexp

from odeint_autograd import SolverStats, odeint
from reproduce.latent import linear_init

NAMES = ("mlp", "resnet", "rknet", "odenet")
LABELS = {"mlp": "1-layer MLP", "resnet": "ResNet", "rknet": "RK-Net", "odenet": "ODE-Net"}
ODE_TOL = 1e-3  # the paper's classification tolerance (Section 6), forward and backward
T_SPAN = (0.0, 1.0)
N_BLOCKS = 6
MLP_HIDDEN = 300


@functools.lru_cache(maxsize=None)
def tf_blocks(dtype="float32", jit=False):
    """The TensorFlow primitives (downsample, dynamics, residual block, head) for a model dtype.

    Models of one dtype share a set (cached), so each shape is traced once; per-step counts are
    differences of the call counters (`mark`, `counts_since`). jit: the ODE dynamics compiled
    with XLA (on the CPU slower than TensorFlow's own kernels: docs/mnist_step.md)."""
    from gpu_dynamics import layers, tf_primitive  # first: it sets TensorFlow's CPU kernels
    import tensorflow as tf
    dt = getattr(tf, dtype)
    return {"down": tf_primitive(layers.downsample, dtype=dt),
            "dynamics": tf_primitive(layers.ode_dynamics, dtype=dt, jit_compile=jit),
            "block": tf_primitive(layers.res_block, dtype=dt),
            "head": tf_primitive(layers.head, dtype=dt)}


def cross_entropy(logits, labels):
    """Mean softmax cross-entropy of integer labels."""
    return -anp.mean(logits[np.arange(len(labels)), labels] - logsumexp(logits, axis=1))


def n_params(params):
    """Scalars in a pytree of arrays (dicts, lists)."""
    return int(flatten(params)[0].size)


class MLP:
    name = "mlp"

    def __init__(self, hidden=MLP_HIDDEN, dtype="float64", jit=False):
        self.hidden = hidden  # numpy float64 throughout: dtype and jit are the conv nets' options

    def init(self, rng):
        """PyTorch's default initialisation: uniform in +-1/sqrt(fan_in)."""
        (w1, b1), (w2, b2) = linear_init(rng, 784, self.hidden), linear_init(rng, self.hidden, 10)
        return {"w1": w1, "b1": b1, "w2": w2, "b2": b2}

    def logits(self, params, x):
        h = anp.maximum(anp.dot(anp.reshape(x, (len(x), -1)), params["w1"]) + params["b1"], 0.0)
        return anp.dot(h, params["w2"]) + params["b2"]

    def mark(self):
        return None

    def counts_since(self, mark):
        return None, None


class _ConvNet:
    """Downsampling, a feature map (the subclass's), head."""

    name = None

    def __init__(self, dtype="float32", jit=False):
        self.blocks = tf_blocks(dtype, jit)
        self.dtype = dtype

    def init(self, rng):
        from gpu_dynamics import layers
        params = {"down": layers.init_downsample(rng)}
        params.update(self.init_features(rng))
        params["head"] = layers.init_head(rng)
        return params

    def logits(self, params, x):
        h = self.blocks["down"](x, *params["down"])
        return self.blocks["head"](self.features(params, h), *params["head"])


class ResNet(_ConvNet):
    name = "resnet"

    def __init__(self, n_blocks=N_BLOCKS, **kwargs):
        super().__init__(**kwargs)
        self.n_blocks = n_blocks

    def init_features(self, rng):
        from gpu_dynamics import layers
        return {"blocks": [layers.init_res_block(rng) for _ in range(self.n_blocks)]}

    def features(self, params, h):
        for block in params["blocks"]:
            h = self.blocks["block"](h, *block)
        return h

    def mark(self):
        return None

    def counts_since(self, mark):
        return self.n_blocks, self.n_blocks


class _ODEBlock(_ConvNet):
    """The 6 residual blocks replaced by one ODE solve of the conv dynamics over t in [0, 1]."""

    def __init__(self, method, rtol=ODE_TOL, atol=ODE_TOL, t_end=T_SPAN[1], step_size=None,
                 dynamics=None, **kwargs):
        super().__init__(**kwargs)
        if dynamics is not None:  # another f(y, t, *the 10 dynamics arrays) (the tests' smooth one)
            self.blocks = dict(self.blocks, dynamics=dynamics)
        self.solver = dict(method=method, rtol=rtol, atol=atol)
        if step_size is not None:  # fixed-step rk4 (memory sweeps): no tolerances
            self.solver = dict(method=method, step_size=step_size)
        self.t = np.array([T_SPAN[0], t_end])
        self.stats = SolverStats()

    def init_features(self, rng):
        from gpu_dynamics import layers
        return {"dynamics": layers.init_ode_dynamics(rng)}

    def features(self, params, h):
        return odeint(self.blocks["dynamics"], h, self.t, args=tuple(params["dynamics"]),
                      stats=self.stats, **self.solver)[-1]

    def mark(self):
        return self.stats.forward.nfe, self.blocks["dynamics"].stats.vjp_calls

    def counts_since(self, mark):
        return (self.stats.forward.nfe - mark[0],
                self.blocks["dynamics"].stats.vjp_calls - mark[1])


class ODENet(_ODEBlock):
    name = "odenet"

    def __init__(self, rtol=ODE_TOL, atol=ODE_TOL, **kwargs):
        super().__init__("adams", rtol, atol, **kwargs)


class RKNet(_ODEBlock):
    name = "rknet"

    def __init__(self, rtol=ODE_TOL, atol=ODE_TOL, method="dopri5", **kwargs):
        if method not in ("dopri5", "rk4"):
            raise ValueError(f"RK-Net backpropagates through 'dopri5' or 'rk4', not {method!r}")
        if method == "rk4" and kwargs.get("step_size") is None:
            raise ValueError("RK-Net with 'rk4' takes fixed steps: give step_size")
        super().__init__(method, rtol, atol, **kwargs)


def make_model(name, **kwargs):
    """A model by its Table 1 name: 'mlp', 'resnet', 'rknet' or 'odenet'."""
    classes = {"mlp": MLP, "resnet": ResNet, "rknet": RKNet, "odenet": ODENet}
    if name not in classes:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(NAMES)}")
    return classes[name](**kwargs)
