"""TensorFlow functions as autograd primitives: the paper's GPU path for the dynamics.

    import tensorflow as tf
    from gpu_dynamics import tf_primitive
    from odeint_autograd import odeint

    @tf_primitive                      # TF tensors in, a TF tensor out
    def mlp(y, t, w1, b1, w2):
        return tf.tanh(y @ w1 + b1) @ w2

    ys = odeint(mlp, y0, t, args=(w1, b1, w2), method="adams")   # numpy float64 in and out

The wrapped function's value and its vector-Jacobian products (with respect to every float
argument, t included) are computed by compiled TensorFlow functions, on the GPU when TensorFlow
sees one. `gpu_dynamics.layers` holds the MNIST building blocks (conv, GroupNorm, the downsampling,
the ODE dynamics, the residual block, the head) as functions of explicit parameter arrays.
"""
import os

# oneDNN's CPU kernels, unless TF_ENABLE_ONEDNN_OPTS says otherwise: TensorFlow turns them on
# itself only on CPUs with AVX-512 VNNI or newer features, and its other kernels are much slower
# at the MNIST layers (docs/mnist_step.md). It is read when TensorFlow loads, so it takes effect
# only if gpu_dynamics is imported first.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

try:
    import tensorflow  # noqa: F401 -- imported here first, so that a missing install is clear
except ImportError as error:
    raise ImportError(
        "gpu_dynamics needs TensorFlow, which could not be imported "
        f"({error}). Install the 'tf' extra: pip install -e .[tf] (or .[tf-gpu] on a machine "
        "with an NVIDIA GPU). odeint_autograd works without it.") from error

from . import layers
from ._primitive import (DEVICE_ENV, THREADS_ENV, CallStats, TFPrimitive, default_device,
                         set_threads, tf_primitive)

__all__ = ["tf_primitive", "TFPrimitive", "CallStats", "default_device", "set_threads", "layers",
           "DEVICE_ENV", "THREADS_ENV"]
