"""`tf_primitive`: a TensorFlow function of tensors becomes an autograd primitive of numpy arrays.

Value and VJP are compiled `tf.function`s with a fixed input signature (one per shapes/dtypes and
set of differentiated arguments), so new values of t or of the parameters never retrace.

Precision: the solver side is float64; inside TensorFlow everything runs in the model dtype
(float32 unless asked otherwise). The state (and the cotangent) is rounded to the model dtype as
it is copied in (numpy's cast, round to nearest like TensorFlow's); values, VJPs and gradients
come back as float64, cast by the compiled function's last operation.

Copies, measured on the CPU at the MNIST block's size (2.4 MB states), where fresh memory costs
page faults: the state (and the cotangent) is copied once, cast, into a 64-byte aligned buffer
kept per argument position and handed to TensorFlow without another copy (DLPack);
tf.convert_to_tensor would copy into fresh memory, once or twice. Results are numpy views of
TensorFlow's output buffers (no copy), read-only so that nothing writes into TensorFlow's memory;
a result that aliases a staging buffer (fn passing an input through) is copied. One call at a
time per wrapped function (a lock guards its buffers).

Threads: TensorFlow's pools are set when the first function is wrapped (unless `set_threads`
ran before): intra-op $GPU_DYNAMICS_THREADS, or 2 when TensorFlow sees no GPU (a
shared CPU machine), inter-op 1. Importing gpu_dynamics changes nothing in TensorFlow.

Parameters (float arrays from position `params_from` on, except 0-d ones) stay on the device
between calls. The rule: an array is copied to the device again whenever its values differ from
the copy last sent (compared on the host, every call), so updating parameters in place is safe;
caching only changes speed, never results. Candidates are looked up by `id`, up to 8 per
argument position, so several parameter sets (e.g. 6 residual blocks sharing one wrapped
function) all stay resident.
"""
import collections
import dataclasses
import functools
import os
import threading
import time

import numpy as np
import tensorflow as tf
from autograd.extend import defvjp_argnums, primitive
from autograd.tracer import isbox

DEVICE_ENV = "GPU_DYNAMICS_DEVICE"  # e.g. "cpu", "gpu", "/GPU:1": the device when none is given
THREADS_ENV = "GPU_DYNAMICS_THREADS"  # TensorFlow's intra-op threads (CPU work)
CPU_THREADS = 2  # the default intra-op threads when TensorFlow sees no GPU
CACHE_PER_POSITION = 8


def default_device():
    """$GPU_DYNAMICS_DEVICE if set, else '/GPU:0' when TensorFlow sees a GPU, else '/CPU:0'."""
    requested = os.environ.get(DEVICE_ENV)
    if requested:
        return _device_name(requested)
    return "/GPU:0" if tf.config.list_physical_devices("GPU") else "/CPU:0"


def _device_name(device):
    """'cpu', 'gpu', 'GPU:1', '/device:GPU:1'... -> '/CPU:0' or '/GPU:k', checked to exist."""
    text = str(device).strip().upper().replace("/DEVICE:", "").lstrip("/")
    kind, _, index = text.partition(":")
    if kind not in ("CPU", "GPU") or not (index or "0").isdigit():
        raise ValueError(f"device must be 'cpu', 'gpu' or like '/GPU:1', not {device!r}")
    index = int(index or 0)
    available = len(tf.config.list_physical_devices(kind))
    if index >= available:  # a logical device (a GPU split in two, virtual CPUs)? Asking starts
        available = len(tf.config.list_logical_devices(kind))  # TensorFlow's runtime: only here
    if index >= available:
        raise ValueError(f"device {device!r}: TensorFlow sees {available} {kind} device(s)")
    return f"/{kind}:{index}"


def set_threads(intra_op, inter_op=1):
    """TensorFlow's thread pools (intra_op: threads inside one op; inter_op: ops run at once).

    Must run before TensorFlow executes anything; without it, a wrapped function's first call
    sets the default (see the module docstring)."""
    global _threads_set
    for name, value in (("intra_op", intra_op), ("inter_op", inter_op)):
        if not (isinstance(value, (int, np.integer)) and value >= 1):
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    try:
        tf.config.threading.set_intra_op_parallelism_threads(int(intra_op))
        tf.config.threading.set_inter_op_parallelism_threads(int(inter_op))
    except RuntimeError as error:
        raise RuntimeError(f"set_threads must run before TensorFlow executes anything ({error})"
                           ) from error
    _threads_set = True


_threads_set = False


def _default_threads():
    """The default pools, set once unless set_threads ran (if TensorFlow already runs, its pools
    are fixed: they are kept)."""
    global _threads_set
    if _threads_set:
        return
    value = os.environ.get(THREADS_ENV)
    if value is not None and not (value.strip().isdigit() and int(value) >= 1):
        raise ValueError(f"${THREADS_ENV} must be a positive integer, not {value!r}")
    if value is not None or not tf.config.list_physical_devices("GPU"):  # a GPU: TF's defaults
        intra = int(value) if value is not None else min(CPU_THREADS, os.cpu_count() or 1)
        try:
            set_threads(intra, 1)
        except RuntimeError:
            pass
    _threads_set = True


@dataclasses.dataclass
class CallStats:
    """What a wrapped function did since its last reset(): TensorFlow calls and their time.

    tf_seconds: inside the compiled functions, from the call until the results are on the host
    (a GPU's compute and copies included). call_seconds: the whole calls, so call_seconds -
    tf_seconds is this wrapper's own cost (numpy -> tensor copies, checks, parameter cache).
    """

    value_calls: int = 0
    vjp_calls: int = 0  # plain VJPs and fused value+VJPs
    tf_seconds: float = 0.0
    call_seconds: float = 0.0
    uploads: int = 0  # parameter arrays copied to the device

    def reset(self):
        self.value_calls = self.vjp_calls = self.uploads = 0
        self.tf_seconds = self.call_seconds = 0.0


def tf_primitive(fn=None, *, dtype=tf.float32, jit_compile=False, device=None, params_from=1):
    """Wrap `fn` (TensorFlow tensors in, one tensor out) as an autograd primitive of numpy arrays.

    Use as `@tf_primitive` or `@tf_primitive(dtype=tf.float64, jit_compile=True)`. The result,
    `wrapped(*arrays)` (each argument one array or number; a list or tuple is refused, as it
    would be one tensor with one gradient), returns fn's value as a float64 array; autograd
    differentiates it with respect to every float argument by TensorFlow's GradientTape. For the
    adjoint it also has `value_and_vjp(g, y, t, *args) -> (f, g_y, g_t, g_args)` (the protocol
    odeint's backward solve uses: one call per evaluation) and `value_and_grads(g, *arrays) ->
    (value, grads)` for any signature.

    dtype: the float type inside TensorFlow (float32, or float64 for exact comparisons).
    jit_compile: compile with XLA. device: 'cpu', 'gpu', '/GPU:1'... (None: `default_device()`).
    params_from: arguments from this position on that are float arrays (not 0-d) are parameters,
    kept on the device between calls (see the module docstring for the rule).
    """
    if fn is None:
        return lambda f: TFPrimitive(f, dtype, jit_compile, device, params_from)
    return TFPrimitive(fn, dtype, jit_compile, device, params_from)


_Cached = collections.namedtuple("_Cached", "host tensor")


class TFPrimitive:
    """A TensorFlow function as an autograd primitive; see `tf_primitive`.

    traces: how often fn has been traced (once per new input signature and kind of call).
    stats: a CallStats of the TensorFlow calls.
    """

    def __init__(self, fn, dtype=tf.float32, jit_compile=False, device=None, params_from=1):
        if not callable(fn):
            raise ValueError(f"fn must be callable, not {type(fn).__name__}")
        try:
            dtype = tf.as_dtype(dtype)
        except TypeError:
            raise ValueError(f"dtype must be a TensorFlow float type, not {dtype!r}") from None
        if not dtype.is_floating:
            raise ValueError(f"dtype must be a TensorFlow float type, not {dtype.name}")
        if not (isinstance(params_from, (int, np.integer)) and not isinstance(params_from, bool)
                and params_from >= 0):
            raise ValueError(f"params_from must be a non-negative integer, not {params_from!r}")
        functools.update_wrapper(self, fn)
        _default_threads()
        self.fn, self.dtype, self.jit_compile = fn, dtype, bool(jit_compile)
        self.device = default_device() if device is None else _device_name(device)
        self.params_from = int(params_from)
        self.traces = 0
        self.stats = CallStats()
        self._np_dtype = dtype.as_numpy_dtype
        # states are cast as they are staged when numpy has the model dtype (not bfloat16)
        self._stage_dtype = self._np_dtype if dtype in (tf.float16, tf.float32) else np.float64
        self._compiled = {}  # (signature, wrt or None) -> concrete function
        self._params = collections.defaultdict(collections.OrderedDict)  # position -> id -> _Cached
        self._staging = {}  # position (-1: the cotangent) -> aligned buffer (_stage_dtype)
        self._lock = threading.Lock()
        self._call = primitive(self._value)
        defvjp_argnums(self._call, self._vjp_maker)

    def __call__(self, *arrays):
        return self._call(*arrays)

    def __repr__(self):
        return (f"tf_primitive({getattr(self.fn, '__name__', self.fn)!r}, "
                f"dtype={self.dtype.name}, jit_compile={self.jit_compile}, "
                f"device={self.device!r})")

    # --- the three kinds of call -----------------------------------------------------------
    def _value(self, *arrays):
        self.stats.value_calls += 1
        out, = self._run(None, arrays)
        return out

    def value_and_grads(self, g, *arrays):
        """(value, grads): fn's value and g^T d fn / d arrays[i] for every argument (None for
        non-float ones), from one TensorFlow call."""
        self._check_untraced(g, arrays, "value_and_grads")
        wrt = tuple(i for i, a in enumerate(arrays) if _is_float(a))
        out, *grads = self._run(wrt, arrays, g)
        full = [None] * len(arrays)
        for i, grad in zip(wrt, grads):
            full[i] = grad
        return out, tuple(full)

    def value_and_vjp(self, g, y, t, *args):
        """(f, g_y, g_t, g_args) for dynamics f(y, t, *args), one TensorFlow call. g_args
        matches args."""
        f, grads = self.value_and_grads(g, y, t, *args)
        return f, grads[0], grads[1], grads[2:]

    def _vjp_maker(self, argnums, ans, arrays, kwargs):
        def vjp(g):
            self._check_untraced(g, arrays, "its VJP")
            _, *grads = self._run(tuple(argnums), arrays, g)
            return tuple(grads)

        return vjp

    def _check_untraced(self, g, arrays, what):
        if isbox(g) or any(isbox(a) for a in arrays):
            raise NotImplementedError(
                f"{self!r}: differentiating {what} (second derivatives through TensorFlow) is not "
                "supported")

    # --- one TensorFlow call ---------------------------------------------------------------
    def _run(self, wrt, arrays, g=None):
        """fn's value (and, when wrt is a tuple, the VJPs wrt those positions) as float64."""
        entered = time.perf_counter()
        for i, a in enumerate(arrays):
            if isinstance(a, (list, tuple, dict)):  # would become one tensor, one gradient
                raise ValueError(f"{self!r}: argument {i} is a {type(a).__name__}; each argument "
                                 "is one array or number (pass np.asarray of it, or its parts "
                                 "as separate arguments)")
        with self._lock:  # the staging buffers are this function's own
            arrays = [np.asarray(a) for a in arrays]
            tensors = [self._tensor(i, a) for i, a in enumerate(arrays)]
            signature = tuple((tuple(x.shape), x.dtype) for x in tensors)
            if wrt is not None:
                self.stats.vjp_calls += 1
                g = np.asarray(g)
                expected = self._output_shape(signature)
                if not expected.is_compatible_with(g.shape):
                    raise ValueError(f"{self!r}: the cotangent g has shape {g.shape}, fn's value "
                                     f"{tuple(expected)}")
                tensors.insert(0, self._staged(-1, g))
                signature = ((g.shape, tensors[0].dtype),) + signature
            compiled = self._concrete(wrt, signature)
            start = time.perf_counter()
            with tf.device(self.device):
                results = [np.asarray(r) for r in compiled(*tensors)]
            self.stats.tf_seconds += time.perf_counter() - start
            staging = self._staging.values()
            for k, r in enumerate(results):
                if any(np.may_share_memory(r, b) for b in staging):  # fn passed an input through
                    results[k] = r = r.copy()
                r.flags.writeable = False
        self.stats.call_seconds += time.perf_counter() - entered
        return results

    def _staged(self, i, a):
        """a as a tensor in the model dtype (float64 if numpy lacks it), through a 64-byte
        aligned buffer kept for position i: one copy, cast on the way, into memory that stays
        mapped (tf.convert_to_tensor copies into fresh memory, once or twice, which costs page
        faults at these sizes); the tensor shares the buffer."""
        buf = self._staging.get(i)
        if buf is None or buf.shape != a.shape:
            itemsize = np.dtype(self._stage_dtype).itemsize
            raw = np.empty(a.size * itemsize + 64, np.uint8)
            start = -raw.ctypes.data % 64
            buf = self._staging[i] = raw[start:start + a.size * itemsize].view(
                self._stage_dtype).reshape(a.shape)
        np.copyto(buf, a, casting="same_kind")
        return tf.experimental.dlpack.from_dlpack(buf.__dlpack__())

    def _tensor(self, i, a):
        """The i-th argument as a tensor: a state staged in the model dtype, a 0-d float as
        float64 (cast inside the compiled function), a cached parameter in the model dtype, or an
        int/bool array as it is."""
        if a.dtype.kind != "f":
            if a.dtype.kind not in "biu":
                raise ValueError(f"{self!r}: argument {i} has dtype {a.dtype}; give float, int "
                                 "or bool arrays")
            return tf.convert_to_tensor(a)
        if a.ndim == 0:
            return tf.constant(float(a), tf.float64)
        if i < self.params_from:
            return self._staged(i, a)
        cache = self._params[i]
        key = id(a)
        hit = cache.get(key)
        if hit is None or not _same(hit.host, a):  # a new or changed array: any equal one?
            hit = next((c for c in cache.values() if _same(c.host, a)), None)
        if hit is None:
            host = np.array(a, dtype=np.float64, copy=True)
            with tf.device(self.device):
                hit = _Cached(host, tf.identity(tf.convert_to_tensor(host.astype(self._np_dtype))))
            self.stats.uploads += 1
        cache[key] = hit
        cache.move_to_end(key)
        if len(cache) > CACHE_PER_POSITION:
            cache.popitem(last=False)
        return hit.tensor

    def _output_shape(self, signature):
        return self._concrete(None, signature).structured_outputs[0].shape

    def _concrete(self, wrt, signature):
        """The compiled function for inputs of this signature ((shape, dtype) per tensor)."""
        key = (signature, wrt)
        compiled = self._compiled.get(key)
        if compiled is None:
            specs = [tf.TensorSpec(shape, dtype) for shape, dtype in signature]
            body = (self._value_body if wrt is None else
                    functools.partial(self._vjp_body, wrt))
            with tf.device(self.device):
                compiled = tf.function(body, input_signature=specs,
                                       jit_compile=self.jit_compile).get_concrete_function()
            self._compiled[key] = compiled
        return compiled

    def _value_body(self, *xs):
        self.traces += 1
        return (tf.cast(self._output(self._model_inputs(xs)), tf.float64),)

    def _vjp_body(self, wrt, g, *xs):
        """fn's value and g^T dfn/dxs[i] for i in wrt, as float64."""
        self.traces += 1
        xs = self._model_inputs(xs)
        watched = [xs[i] for i in wrt]
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(watched)
            out = self._output(xs)
        grads = tape.gradient(out, watched, output_gradients=tf.cast(g, out.dtype),
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return tuple(tf.cast(r, tf.float64) for r in (out, *grads))

    def _model_inputs(self, xs):
        """The float inputs cast to the model dtype (the others as they are)."""
        return [tf.cast(x, self.dtype) if x.dtype.is_floating else x for x in xs]

    def _output(self, xs):
        """fn on inputs in the model dtype, checked to be one float tensor."""
        out = self.fn(*xs)
        if not isinstance(out, (tf.Tensor, tf.Variable)) or not out.dtype.is_floating:
            raise ValueError(f"{self!r}: fn must return one float tensor, not {out!r}")
        return out


def _same(host, a):
    return host.shape == a.shape and np.array_equal(host, a)


def _is_float(a):
    return np.asarray(a).dtype.kind == "f"
