"""gpu_dynamics: TensorFlow-evaluated functions as autograd primitives, and the MNIST blocks."""
import os
import subprocess
import sys
import textwrap

import autograd
from autograd.misc import flatten
import autograd.numpy as anp
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
import gpu_dynamics  # noqa: E402
from gpu_dynamics import layers, tf_primitive  # noqa: E402
from odeint_autograd import SolverStats, odeint  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
f64 = tf.float64


def rel_err(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


# --- an MLP in TensorFlow and the same MLP in autograd numpy ----------------------------------
def mlp_tf(y, t, w1, b1, w2):
    return tf.tanh(y @ w1 + b1 + t) @ w2


def mlp_np(y, t, w1, b1, w2):
    return anp.tanh(anp.dot(y, w1) + b1 + t) @ w2


def mlp_params(rng, d=3, hidden=8):
    return [rng.randn(d, hidden) * 0.5, rng.randn(hidden) * 0.1, rng.randn(hidden, d) * 0.5]


def test_mlp_odeint_values_and_gradients_match_autograd_numpy():
    rng = np.random.RandomState(0)
    y0, t, params = rng.randn(2, 3), np.array([0.0, 0.4, 1.0]), mlp_params(rng)
    weights = rng.randn(3, 2, 3)
    f_tf = tf_primitive(mlp_tf, dtype=f64)

    def loss(func):
        def fun(y0, t, params):
            ys = odeint(func, y0, t, args=tuple(params), rtol=1e-10, atol=1e-10, method="adams")
            return anp.sum(ys * weights) + anp.sum(ys[-1] ** 2)
        return fun

    ys_tf = odeint(f_tf, y0, t, args=tuple(params), rtol=1e-10, atol=1e-10, method="adams")
    ys_np = odeint(mlp_np, y0, t, args=tuple(params), rtol=1e-10, atol=1e-10, method="adams")
    assert rel_err(ys_tf, ys_np) < 1e-8
    f_tf.stats.reset()
    g_tf = autograd.grad(loss(f_tf), (0, 1, 2))(y0, t, params)
    assert f_tf.stats.vjp_calls > 0  # the backward solves called TensorFlow's VJP
    g_np = autograd.grad(loss(mlp_np), (0, 1, 2))(y0, t, params)
    assert rel_err(g_tf[0], g_np[0]) < 1e-8
    assert rel_err(g_tf[1], g_np[1]) < 1e-8
    for a, b in zip(g_tf[2], g_np[2]):
        assert rel_err(a, b) < 1e-8


@pytest.mark.parametrize("dtype, adjoint_method", [(f64, None), (tf.float32, None),
                                                   (tf.float32, "lsoda"), (tf.float32, "bosh3")])
def test_fused_value_and_vjp_gives_the_plain_gradients(dtype, adjoint_method):
    """The two ways the backward solve can get the augmented derivative (the wrapped function's
    fused value_and_vjp, or autograd tracing its value and VJP) give the same gradients, in
    float32 too, with scipy's solvers (VODE's adams, LSODA) and a Runge-Kutta pair (bosh3) as
    the adjoint solver."""
    rng = np.random.RandomState(1)
    y0, t, params = rng.randn(2, 3), np.array([0.0, 0.5, 1.0]), mlp_params(rng)
    f = tf_primitive(mlp_tf, dtype=dtype)
    plain = lambda y, t, *p: f(y, t, *p)  # noqa: E731 -- no fused call: autograd's VJP path

    def grads(func, stats):
        def fun(y0, t, params):
            return anp.sum(odeint(func, y0, t, args=tuple(params), rtol=1e-8, atol=1e-8,
                                  method="adams", adjoint_method=adjoint_method,
                                  stats=stats) ** 2)
        return autograd.grad(fun, (0, 1, 2))(y0, t, params)

    results = {}
    for name, func in (("fused", f), ("plain", plain)):
        f.stats.reset()
        stats = SolverStats()
        results[name] = flatten(grads(func, stats))[0]
        if name == "plain":  # autograd's path: a value call and a VJP call per evaluation
            assert f.stats.value_calls == stats.forward.nfe + len(t) - 1 + stats.backward.nfe
        else:
            # one TensorFlow call per augmented evaluation: no value calls beyond the forward
            # solve's and the len(t) - 1 of dL/dt_i = g_i . f(z(t_i))
            assert f.stats.vjp_calls == stats.backward.nfe > 0
            assert f.stats.value_calls == stats.forward.nfe + len(t) - 1
    assert rel_err(results["fused"], results["plain"]) < 1e-12
    assert not hasattr(f, "augmented_dynamics")  # one backward protocol
    if dtype != f64:
        return

    # and the protocol itself: (f, g_y, g_t, g_args) with g_args matching args
    g = rng.randn(2, 3)
    value, g_y, g_t, g_args = f.value_and_vjp(g, y0, 0.3, *params)
    vjp, _ = autograd.make_vjp(lambda y, tt, *p: f(y, tt, *p), argnum=(0, 1, 2, 3, 4))(
        y0, 0.3, *params)
    expected = vjp(g)
    assert np.allclose(value, mlp_np(y0, 0.3, *params), rtol=1e-13, atol=0)
    assert isinstance(g_args, tuple) and len(g_args) == 3
    for a, b in zip((g_y, g_t) + g_args, expected):
        assert np.shape(a) == np.shape(b) and rel_err(a, b) < 1e-13


def test_value_and_vjp_with_an_int_argument():
    """An int argument gets no gradient and no slot in the augmented state; the float ones keep
    their order, so odeint's gradients through value_and_vjp equal autograd numpy's."""
    rng = np.random.RandomState(4)
    y0, params = rng.randn(2, 3), mlp_params(rng)
    power = np.array(3)

    @tf_primitive(dtype=f64)
    def f_tf(y, t, w1, k, b1, w2):
        return mlp_tf(y, t, w1, b1, w2) / tf.cast(k, y.dtype)

    def f_np(y, t, w1, k, b1, w2):
        return mlp_np(y, t, w1, b1, w2) / k

    def loss(func):
        return lambda p: anp.sum(odeint(func, y0, [0.0, 0.7], (p[0], power, p[1], p[2]),
                                        rtol=1e-10, atol=1e-10, method="adams")[-1] ** 2)
    f_tf.stats.reset()
    got = autograd.grad(loss(f_tf))(params)
    assert f_tf.stats.vjp_calls > 0
    for a, b in zip(got, autograd.grad(loss(f_np))(params)):
        assert rel_err(a, b) < 1e-8


def test_a_wrong_value_and_vjp_is_refused():
    f = tf_primitive(mlp_tf, dtype=f64)
    rng = np.random.RandomState(3)
    y0, params = rng.randn(2, 3), mlp_params(rng)

    def bad(y, t, *p):
        return f(y, t, *p)

    def short(g, y, t, *p):  # a VJP with respect to y of the wrong size
        value, g_y, g_t, g_p = f.value_and_vjp(g, y, t, *p)
        return value, np.ravel(g_y)[:-1], g_t, g_p
    bad.value_and_vjp = short
    with pytest.raises(ValueError, match="value_and_vjp's parts add up to"):
        autograd.grad(lambda y: anp.sum(odeint(bad, y, [0.0, 1.0], tuple(params))))(y0)


def test_no_retrace_for_new_times_or_parameter_values():
    rng = np.random.RandomState(2)
    f = tf_primitive(mlp_tf)
    y, params = rng.randn(4, 3), mlp_params(rng)
    for i in range(100):
        f(y, 0.01 * i, *[p + i for p in params])
    assert f.traces == 1
    for i in range(100):
        f.value_and_vjp(y, y, np.float64(0.01 * i), *params)
    assert f.traces == 2
    f(rng.randn(5, 3), 0.5, *params)  # a new shape is a new signature: one more trace
    assert f.traces == 3


def test_parameters_are_uploaded_only_when_their_values_change():
    rng = np.random.RandomState(3)
    f = tf_primitive(mlp_tf, dtype=f64)
    y, params = rng.randn(4, 3), mlp_params(rng)
    f(y, 0.1, *params)
    f(y, 0.2, *params)
    f(y, 0.3, *[p.copy() for p in params])  # equal values in new arrays: nothing to copy
    assert f.stats.uploads == 3
    params[0] *= 2.0  # in place: must be noticed
    assert np.allclose(f(y, 0.3, *params), mlp_np(y, 0.3, *params), rtol=1e-13, atol=0)
    assert f.stats.uploads == 4


def test_results_are_float64_read_only_and_never_overwritten():
    rng = np.random.RandomState(12)
    identity = tf_primitive(lambda y, t: y, dtype=f64)  # returns its (staged) input
    y1, y2 = rng.randn(3, 2), rng.randn(3, 2)
    out1 = identity(y1, 0.0)
    out2, (g_y, g_t) = identity.value_and_grads(y1, y2, 0.0)
    assert np.array_equal(out1, y1) and np.array_equal(out2, y2) and np.array_equal(g_y, y1)
    assert out1.dtype == np.float64 and g_t == 0.0
    with pytest.raises(ValueError, match="read-only"):
        out1[0, 0] = 1.0


def test_states_are_rounded_to_the_model_dtype_once_to_nearest():
    """The state is rounded to the model dtype as it is staged (numpy's cast for float16/32,
    TensorFlow's for bfloat16): either way round to nearest, as a cast inside TensorFlow; so
    is the cotangent; results come back in float64."""
    rng = np.random.RandomState(13)
    y, a = rng.randn(5, 7), rng.randn(5, 7)
    for dtype in (tf.float16, tf.bfloat16, tf.float32, f64):
        f = tf_primitive(lambda y, t: y * tf.cast(t, y.dtype), dtype=dtype)
        rounded = tf.cast(tf.constant(y), dtype).numpy().astype(np.float64)
        out = f(y, 1.0)
        assert out.dtype == np.float64 and np.array_equal(out, rounded), dtype.name
        value, g_y, _, _ = f.value_and_vjp(a, y, 1.0)
        assert value.dtype == g_y.dtype == np.float64
        assert np.array_equal(value, rounded), dtype.name
        a_rounded = tf.cast(tf.constant(a), dtype).numpy().astype(np.float64)
        assert np.array_equal(g_y, a_rounded), dtype.name
        assert np.array_equal(rounded, y) == (dtype == f64)


# --- the MNIST blocks: VJPs against finite differences ----------------------------------------
def fd_check(wrapped, arrays, rng, eps=1e-6, tol=1e-6):
    """g^T J v by the VJP against central differences of g^T f along a random v, per argument."""
    value = wrapped(*arrays)
    g = rng.randn(*value.shape)
    _, grads = wrapped.value_and_grads(g, *arrays)
    for i, a in enumerate(arrays):
        v = rng.randn(*np.shape(a))
        shift = lambda s: [x + s * v if j == i else x for j, x in enumerate(arrays)]  # noqa
        fd = (np.sum(g * wrapped(*shift(eps))) - np.sum(g * wrapped(*shift(-eps)))) / (2 * eps)
        assert abs(np.sum(grads[i] * v) - fd) <= tol * max(1.0, abs(fd)), f"argument {i}"


def test_ode_dynamics_vjps_match_finite_differences():
    rng = np.random.RandomState(4)
    f = tf_primitive(layers.ode_dynamics, dtype=f64)
    params = layers.init_ode_dynamics(rng, channels=4)
    params = [p + 0.1 * rng.randn(*p.shape) for p in params]  # GroupNorm off its initial values
    fd_check(f, [rng.randn(2, 5, 5, 4), np.float64(0.7)] + params, rng)


@pytest.mark.parametrize("block", ["downsample", "res_block", "head"])
def test_block_vjps_match_finite_differences(block):
    rng = np.random.RandomState(5)
    c = 4
    x, params = {
        "downsample": (rng.rand(2, 12, 12, 1), layers.init_downsample(rng, channels=c)),
        "res_block": (rng.randn(2, 4, 4, c), layers.init_res_block(rng, channels=c)),
        "head": (rng.randn(2, 3, 3, c), layers.init_head(rng, channels=c, classes=3)),
    }[block]
    params = [p + 0.1 * rng.randn(*p.shape) for p in params]
    fd_check(tf_primitive(getattr(layers, block), dtype=f64), [x] + params, rng)


def test_conv_dynamics_gradient_through_odeint_matches_finite_differences():
    # RK4 with direct backprop: the gradient of the discrete solution is exact, so central
    # differences check the primitive's VJPs as the solver composes them (adaptive solvers' step
    # choices would make the differences noisy; the adjoint is checked against numpy above).
    rng = np.random.RandomState(6)
    f = tf_primitive(layers.ode_dynamics, dtype=f64)
    params = [p + 0.1 * rng.randn(*p.shape) for p in layers.init_ode_dynamics(rng, channels=4)]
    y0, weights = rng.randn(2, 3, 3, 4), rng.randn(2, 3, 3, 4)

    def loss(y0, t, w):
        ys = odeint(f, y0, t, args=tuple(params[:2]) + (w,) + tuple(params[3:]), method="rk4",
                    step_size=0.045)  # 23 steps, also for the shifted times
        return np.sum(ys[-1] * weights)

    args = [y0, np.array([0.0, 1.0]), params[2]]
    grads = autograd.grad(loss, (0, 1, 2))(*args)
    for i, (x, g) in enumerate(zip(args, grads)):
        v = rng.randn(*x.shape)
        plus, minus = list(args), list(args)
        plus[i], minus[i] = x + 1e-6 * v, x - 1e-6 * v
        fd = (loss(*plus) - loss(*minus)) / 2e-6
        assert abs(np.sum(g * v) - fd) < 1e-7 * max(1.0, abs(fd)), f"argument {i}"


def test_xla_and_float32_agree_with_float64():
    rng = np.random.RandomState(7)
    params = layers.init_ode_dynamics(rng, channels=4)
    y, g = rng.randn(2, 4, 4, 4), rng.randn(2, 4, 4, 4)
    flat = lambda out: [out[0], out[1], out[2]] + list(out[3])  # noqa: E731
    ref = flat(tf_primitive(layers.ode_dynamics, dtype=f64).value_and_vjp(g, y, 0.3, *params))
    xla = flat(tf_primitive(layers.ode_dynamics, dtype=f64, jit_compile=True).value_and_vjp(
        g, y, 0.3, *params))
    single = flat(tf_primitive(layers.ode_dynamics).value_and_vjp(g, y, 0.3, *params))
    single_xla = flat(tf_primitive(layers.ode_dynamics, jit_compile=True).value_and_vjp(
        g, y, 0.3, *params))
    scale = lambda a: max(np.max(np.abs(a)), 1.0)  # noqa: E731 -- some VJPs are exactly 0
    for a, b, c, d in zip(ref, xla, single, single_xla):
        assert np.max(np.abs(b - a)) < 1e-10 * scale(a)
        assert np.max(np.abs(c - a)) < 1e-4 * scale(a)
        assert np.max(np.abs(d - a)) < 1e-4 * scale(a)
        assert np.asarray(c).dtype == np.asarray(d).dtype == np.float64
    assert rel_err(single[0], ref[0]) > 1e-12  # float32 inside TensorFlow for the default


# --- the blocks' shapes, parameter counts and definitions -------------------------------------
def test_mnist_shapes_and_parameter_counts():
    rng = np.random.RandomState(8)
    down, dyn, head = (layers.init_downsample(rng), layers.init_ode_dynamics(rng),
                       layers.init_head(rng))
    h = layers.downsample(tf.constant(rng.rand(2, 28, 28, 1)), *down)
    assert h.shape == (2, 6, 6, 64)
    assert layers.ode_dynamics(h, 0.5, *dyn).shape == (2, 6, 6, 64)
    assert layers.head(h, *head).shape == (2, 10)
    assert layers.n_params(down) == 132_096 and layers.n_params(dyn) == 75_392
    assert layers.n_params([down, dyn, head]) == 208_266  # ODE-Net, "0.22 M" in Table 1
    blocks = [layers.init_res_block(rng) for _ in range(6)]
    assert layers.n_params([down, blocks, head]) == 576_778  # ResNet, "0.60 M"
    assert np.array_equal(layers.init_ode_dynamics(3)[2], layers.init_ode_dynamics(3)[2])


def test_group_norm_matches_its_definition():
    rng = np.random.RandomState(9)
    x, gamma, beta = rng.randn(3, 4, 5, 8), rng.randn(8), rng.randn(8)
    out = layers.group_norm(tf.constant(x), gamma, beta, groups=2).numpy()
    xs = x.reshape(3, 4, 5, 2, 4)
    mean = xs.mean(axis=(1, 2, 4), keepdims=True)
    var = xs.var(axis=(1, 2, 4), keepdims=True)
    expected = ((xs - mean) / np.sqrt(var + 1e-5)).reshape(x.shape) * gamma + beta
    assert rel_err(out, expected) < 1e-12
    with pytest.raises(ValueError, match="groups"):
        layers.group_norm(tf.constant(x), gamma, beta, groups=3)


def test_conv_padding_and_time_channel():
    rng = np.random.RandomState(10)
    x, w = tf.constant(rng.randn(1, 13, 13, 2)), rng.randn(4, 4, 2, 3)
    assert layers.conv2d(x, w, stride=2, padding=1).shape == (1, 6, 6, 3)
    w3 = rng.randn(3, 3, 2, 3)
    assert rel_err(layers.conv2d(x, w3, padding=1), layers.conv2d(x, w3, padding="SAME")) < 1e-14
    wt = rng.randn(3, 3, 3, 3)
    with_t = tf.concat([tf.fill([1, 13, 13, 1], tf.constant(0.25, f64)), x], axis=-1)
    assert rel_err(layers.concat_conv2d(x, 0.25, wt), layers.conv2d(with_t, wt)) < 1e-14


# --- errors, device, threads, a missing TensorFlow --------------------------------------------
def test_bad_input_raises_value_error(monkeypatch):
    rng = np.random.RandomState(11)
    with pytest.raises(ValueError, match="dtype"):
        tf_primitive(mlp_tf, dtype=tf.int32)
    with pytest.raises(ValueError, match="device"):
        tf_primitive(mlp_tf, device="tpu")
    f = tf_primitive(mlp_tf, dtype=f64)
    y, params = rng.randn(4, 3), mlp_params(rng)
    with pytest.raises(ValueError, match="cotangent"):
        f.value_and_vjp(rng.randn(4, 2), y, 0.1, *params)
    with pytest.raises(NotImplementedError, match="second derivatives"):
        autograd.hessian(lambda y: anp.sum(f(y, 0.1, *params)))(y)
    with pytest.raises(ValueError, match="dtype must be a TensorFlow float type"):
        tf_primitive(mlp_tf, dtype="floaty")  # was TensorFlow's TypeError
    with pytest.raises(ValueError, match="params_from"):
        tf_primitive(mlp_tf, params_from=True)
    # a list argument became one tensor: its one gradient broke odeint's flattened args (the
    # forward solve ran); refused at the first call, forward or backward
    scaled = tf_primitive(lambda y, t, ab: -ab[0] * ab[1] * y, dtype=f64)
    for call in (lambda: odeint(scaled, np.ones(2), [0.0, 1.0], ([0.5, 0.3],), method="adams"),
                 lambda: autograd.grad(lambda a: anp.sum(odeint(
                     scaled, np.ones(2), [0.0, 1.0], ([a, 0.3],), method="adams")))(0.5)):
        with pytest.raises(ValueError, match="argument 2 is a list"):
            call()
    a = 0.5  # one array instead: the gradient d/da sum(e^{-0.3 a} [1, 1]) = -0.6 e^{-0.3 a}
    g = autograd.grad(lambda a: anp.sum(odeint(scaled, np.ones(2), [0.0, 1.0],
                                               (anp.array([a, 0.3]),), method="adams",
                                               rtol=1e-10, atol=1e-10)[-1]))(a)
    assert abs(g - (-0.6 * np.exp(-0.3 * a))) < 1e-7
    monkeypatch.setenv(gpu_dynamics.DEVICE_ENV, "cpu")
    assert gpu_dynamics.default_device() == "/CPU:0"
    if not tf.config.list_physical_devices("GPU"):
        monkeypatch.setenv(gpu_dynamics.DEVICE_ENV, "gpu")
        with pytest.raises(ValueError, match="sees 0 GPU"):
            gpu_dynamics.default_device()


def _python(code, **env):
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env})
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_a_chosen_device_holds_the_parameters_and_gives_the_same_solve():
    """The device plumbing, exercised on a second (virtual) CPU: parameters live on the chosen
    device, the solve and its gradient equal those on the default device, and a device that
    does not exist is refused. (The path a GPU takes; no GPU here.)"""
    out = _python("""
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
        import autograd, autograd.numpy as anp, numpy as np
        import gpu_dynamics
        from odeint_autograd import odeint

        def mlp(y, t, w1, b1, w2):
            return tf.matmul(tf.tanh(tf.matmul(y, w1) + b1 + t), w2)

        rng = np.random.RandomState(0)
        y0, params = rng.randn(5, 3), (rng.randn(3, 8), rng.randn(8), rng.randn(8, 3) / 8)
        t = np.linspace(0.0, 1.0, 4)
        results = {}
        for device in ("/CPU:0", "cpu:1"):
            f = gpu_dynamics.tf_primitive(mlp, dtype=tf.float64, device=device)
            loss = lambda y0, p: anp.sum(odeint(f, y0, t, args=p, rtol=1e-9, atol=1e-9) ** 2)
            value, grads = autograd.value_and_grad(loss, (0, 1))(y0, params)
            cached = [c.tensor.device for pos in f._params.values() for c in pos.values()]
            assert cached and all(d.endswith(f.device[1:]) for d in cached), (f.device, cached)
            results[f.device] = value, grads
        (v0, g0), (v1, g1) = results["/CPU:0"], results["/CPU:1"]
        assert abs(v0 - v1) <= 1e-12 * abs(v0)
        assert np.allclose(g0[0], g1[0], rtol=1e-10, atol=0)
        assert all(np.allclose(a, b, rtol=1e-10, atol=0) for a, b in zip(g0[1], g1[1]))
        try:
            gpu_dynamics.tf_primitive(mlp, device="/CPU:2")
        except ValueError as e:
            print("refused:", e)
        """)
    assert "refused:" in out and "sees 2 CPU" in out


def test_threads_default_and_environment_variable():
    """Importing gpu_dynamics leaves TensorFlow's pools alone; wrapping the first function sets
    the default, unless set_threads ran before."""
    code = """
        import gpu_dynamics, tensorflow as tf
        threads = tf.config.threading.get_intra_op_parallelism_threads
        imported = threads()
        {before}
        gpu_dynamics.tf_primitive(tf.sin)
        print(imported, threads(), len(tf.config.list_physical_devices("GPU")))
        """
    imported, threads, gpus = _python(code.format(before="")).split()
    assert imported == "0"  # TensorFlow's own default
    if gpus == "0":
        assert threads == str(min(2, os.cpu_count()))
    assert _python(code.format(before=""), GPU_DYNAMICS_THREADS="1").split()[1] == "1"
    explicit = "gpu_dynamics.set_threads(3)"
    assert _python(code.format(before=explicit), GPU_DYNAMICS_THREADS="1").split()[1] == "3"


def test_import_without_tensorflow_says_how_to_install():
    out = _python("""
        import sys
        class NoTensorFlow:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "tensorflow":
                    raise ImportError("No module named 'tensorflow'")
        sys.meta_path.insert(0, NoTensorFlow())
        import numpy as np
        from odeint_autograd import odeint
        ys = odeint(lambda y, t: -y, np.ones(2), np.array([0.0, 1.0]))
        assert abs(ys[-1, 0] - np.exp(-1)) < 1e-6
        try:
            import gpu_dynamics
        except ImportError as e:
            print(e)
        """)
    assert "pip install -e .[tf]" in out and "TensorFlow" in out
