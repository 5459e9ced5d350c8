"""The MNIST networks' TensorFlow building blocks, as functions of explicit parameter tensors.

No Keras state: every parameter is an argument, so a block wrapped with `tf_primitive` shows all of
them to autograd. Layout NHWC (batch, height, width, channels): TensorFlow's convolutions on the
CPU need it. Convolution weights are (kh, kw, c_in, c_out), TensorFlow's HWIO order.

The architecture is the authors' public example (torchdiffeq's examples/odenet_mnist.py); with
28x28x1 inputs:

    downsample   conv 1->64 3x3 (no padding)                      28 -> 26
                 GroupNorm, ReLU, conv 64->64 4x4 stride 2 pad 1  26 -> 13
                 GroupNorm, ReLU, conv 64->64 4x4 stride 2 pad 1  13 -> 6   (floor(11/2) + 1)
    ODE block    dy/dt = GN(conv(ReLU(GN(conv(ReLU(GN(y)), t))), t)), convs 65->64 3x3 pad 1
                 with t as an extra input channel (channel 0), t in [0, 1]
    ResNet       6 pre-activation residual blocks x + conv(ReLU(GN(conv(ReLU(GN(x)))))),
                 3x3 pad 1 convs without bias, in place of the ODE block
    head         GroupNorm, ReLU, global average pool, linear 64 -> 10 (logits)

GroupNorm has min(32, channels) groups, eps 1e-5 and a per-channel scale and shift. The `init_*`
functions draw PyTorch's default initialisation (what the authors' example used): weights and
biases uniform in +-1/sqrt(fan_in), GroupNorm scale 1 and shift 0. Parameter counts: ODE-Net
208,266 (downsample 132,096 + dynamics 75,392 + head 778), ResNet 576,778 (6 x 73,984 blocks).
"""
import numpy as np
import tensorflow as tf
from autograd.misc import flatten

relu = tf.nn.relu


def conv2d(x, w, b=None, stride=1, padding="SAME"):
    """2-D convolution of NHWC x with HWIO weights w (and a bias b of c_out entries).

    padding: 'SAME', 'VALID', or an int p: p zeros on each side (PyTorch's padding=p), applied
    by tf.pad before a 'VALID' convolution: TensorFlow's CPU gradient kernels for a convolution
    with explicit padding are several times slower than those of a padded 'VALID' one."""
    if isinstance(padding, (int, np.integer)):
        p = int(padding)
        x, padding = tf.pad(x, [[0, 0], [p, p], [p, p], [0, 0]]), "VALID"
    y = tf.nn.conv2d(x, w, strides=stride, padding=padding)
    return y if b is None else y + b


def concat_conv2d(x, t, w, b=None, stride=1, padding="SAME"):
    """conv2d of x with the time t put in front as one more channel, constant over the image
    (the authors' ConcatConv2d): w has c_in + 1 input channels."""
    tt = tf.ones_like(x[..., :1]) * tf.cast(t, x.dtype)
    return conv2d(tf.concat([tt, x], axis=-1), w, b, stride, padding)


def group_norm(x, gamma, beta, groups=None, eps=1e-5):
    """GroupNorm over the last (channel) axis of x (N, ..., C): each sample's channels split into
    `groups` groups (default min(32, C)), each normalised over its channels and positions.

    Two passes over x, each reducing the positions of the NHWC tensor to per-channel means (whose
    mean over a group is the group's mean: every channel has as many positions); TensorFlow's
    reduction over the non-adjacent axes of a (N, H, W, groups, C / groups) view is several times
    slower, forward and backward."""
    channels = x.shape[-1]
    groups = min(32, channels) if groups is None else groups
    if channels % groups:
        raise ValueError(f"group_norm: {channels} channels do not split into {groups} groups")
    positions = list(range(1, len(x.shape) - 1))

    def group_mean(v):  # (N, C) per-channel means -> each channel its group's mean, broadcastable
        m = tf.reduce_mean(tf.reshape(v, [-1, groups, channels // groups]), -1)
        return tf.reshape(tf.repeat(m, channels // groups, axis=-1),
                          [-1] + [1] * len(positions) + [channels])

    mean = group_mean(tf.reduce_mean(x, positions))
    centred = x - mean
    var = group_mean(tf.reduce_mean(tf.square(centred), positions))
    return centred * (tf.math.rsqrt(var + eps) * gamma) + beta


def downsample(x, conv1_w, conv1_b, gn1_gamma, gn1_beta, conv2_w, conv2_b, gn2_gamma, gn2_beta,
               conv3_w, conv3_b):
    """(N, 28, 28, 1) images -> (N, 6, 6, 64) features: conv 3x3, then twice GroupNorm, ReLU and
    a 4x4 stride-2 conv with padding 1."""
    h = conv2d(x, conv1_w, conv1_b, padding="VALID")
    h = conv2d(relu(group_norm(h, gn1_gamma, gn1_beta)), conv2_w, conv2_b, stride=2, padding=1)
    return conv2d(relu(group_norm(h, gn2_gamma, gn2_beta)), conv3_w, conv3_b, stride=2, padding=1)


def ode_dynamics(y, t, gn1_gamma, gn1_beta, conv1_w, conv1_b, gn2_gamma, gn2_beta, conv2_w,
                 conv2_b, gn3_gamma, gn3_beta):
    """The ODE-Net's dy/dt: GroupNorm-ReLU-conv(t channel)-GroupNorm-ReLU-conv(t channel)-
    GroupNorm, 3x3 convolutions with padding 1."""
    h = concat_conv2d(relu(group_norm(y, gn1_gamma, gn1_beta)), t, conv1_w, conv1_b)
    h = concat_conv2d(relu(group_norm(h, gn2_gamma, gn2_beta)), t, conv2_w, conv2_b)
    return group_norm(h, gn3_gamma, gn3_beta)


def res_block(x, gn1_gamma, gn1_beta, conv1_w, gn2_gamma, gn2_beta, conv2_w):
    """A pre-activation residual block (He et al. 2016b): x + conv(ReLU(GN(conv(ReLU(GN(x))))))."""
    h = conv2d(relu(group_norm(x, gn1_gamma, gn1_beta)), conv1_w)
    return x + conv2d(relu(group_norm(h, gn2_gamma, gn2_beta)), conv2_w)


def head(h, gn_gamma, gn_beta, w, b):
    """(N, H, W, C) features -> (N, classes) logits: GroupNorm, ReLU, mean over H and W, linear."""
    return tf.reduce_mean(relu(group_norm(h, gn_gamma, gn_beta)), axis=[1, 2]) @ w + b


# --- parameters (numpy float64, seeded) ------------------------------------------------------
def _rng(rng):
    return np.random.RandomState(rng) if isinstance(rng, (int, np.integer)) else rng


def _fan_in_uniform(rng, fan_in, *shapes):
    """Arrays of the given shapes, in order, uniform in +-1/sqrt(fan_in) (PyTorch's default)."""
    bound = 1.0 / np.sqrt(fan_in)
    return [rng.uniform(-bound, bound, shape) for shape in shapes]


def init_conv(rng, kernel, c_in, c_out, bias=True):
    """[w (kernel, kernel, c_in, c_out)] + [b (c_out,)] if bias, uniform in +-1/sqrt(fan_in)."""
    shapes = [(kernel, kernel, c_in, c_out)] + [(c_out,)] * bias
    return _fan_in_uniform(_rng(rng), c_in * kernel * kernel, *shapes)


def init_group_norm(channels):
    """[gamma (ones), beta (zeros)]."""
    return [np.ones(channels), np.zeros(channels)]


def init_downsample(rng, in_channels=1, channels=64):
    """The 10 arrays `downsample` takes after x."""
    rng = _rng(rng)
    return (init_conv(rng, 3, in_channels, channels) + init_group_norm(channels)
            + init_conv(rng, 4, channels, channels) + init_group_norm(channels)
            + init_conv(rng, 4, channels, channels))


def init_ode_dynamics(rng, channels=64):
    """The 10 arrays `ode_dynamics` takes after y and t."""
    rng = _rng(rng)
    return (init_group_norm(channels) + init_conv(rng, 3, channels + 1, channels)
            + init_group_norm(channels) + init_conv(rng, 3, channels + 1, channels)
            + init_group_norm(channels))


def init_res_block(rng, channels=64):
    """The 6 arrays `res_block` takes after x."""
    rng = _rng(rng)
    return (init_group_norm(channels) + init_conv(rng, 3, channels, channels, bias=False)
            + init_group_norm(channels) + init_conv(rng, 3, channels, channels, bias=False))


def init_head(rng, channels=64, classes=10):
    """The 4 arrays `head` takes after h: GroupNorm, then w (channels, classes) and b."""
    return init_group_norm(channels) + _fan_in_uniform(_rng(rng), channels, (channels, classes),
                                                       (classes,))


def n_params(params):
    """The number of scalars in a pytree (dicts, lists, tuples) of arrays."""
    return int(flatten(params)[0].size)
