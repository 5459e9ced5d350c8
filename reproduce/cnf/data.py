"""What the flows are fitted to: Figure 4's unnormalised target densities and Figure 6's data sets.

Figure 4 (the paper does not name its targets): the energies U1, U2, U3 of Rezende and Mohamed
(2015, Table 1), p(z) proportional to exp(-U(z)). U2 and U3 are constant along their sine wave
for all z1, so exp(-U) is not integrable; we keep them exactly as published inside the window
|z1| <= 4 (where Rezende and Mohamed plot them) and add a Gaussian fall-off of width 0.2 outside,
which makes them proper. log Z is computed by quadrature on a grid, so that KL(q || p) can be
reported as well as the loss E_q[log q + U] = KL - log Z.

Figure 6: Two Circles and Two Moons drawn with numpy (below), the shapes of scikit-learn's
make_circles and make_moons, scaled to the standard normal base density.
"""
import autograd.numpy as anp
import numpy as np


def _w1(z):
    return anp.sin(np.pi * z[:, 0] / 2)


def _wall(z, half_width=4.0, falloff=0.2):
    """0 inside |z1| <= half_width, 0.5 ((|z1| - half_width) / falloff)^2 outside."""
    excess = anp.maximum(anp.abs(z[:, 0]) - half_width, 0.0)
    return 0.5 * (excess / falloff) ** 2


def u1(z):
    """Ring of radius 2 with two modes at z1 = +-2 (Rezende and Mohamed's U1)."""
    r = anp.sqrt(anp.sum(z ** 2, axis=1))
    return 0.5 * ((r - 2) / 0.4) ** 2 - anp.logaddexp(-0.5 * ((z[:, 0] - 2) / 0.6) ** 2,
                                                      -0.5 * ((z[:, 0] + 2) / 0.6) ** 2)


def u2(z):
    """Sine wave (U2), made proper by the wall at |z1| = 4."""
    return 0.5 * ((z[:, 1] - _w1(z)) / 0.4) ** 2 + _wall(z)


def u3(z):
    """Two sine waves that split near z1 = 1 (U3), made proper by the wall at |z1| = 4."""
    w2 = 3 * anp.exp(-0.5 * ((z[:, 0] - 1) / 0.6) ** 2)
    return -anp.logaddexp(-0.5 * ((z[:, 1] - _w1(z)) / 0.35) ** 2,
                          -0.5 * ((z[:, 1] - _w1(z) + w2) / 0.35) ** 2) + _wall(z)


TARGETS = {"U1": u1, "U2": u2, "U3": u3}
PLOT_LIMIT = 4.0  # Figure 4's panels show [-4, 4]^2, as Rezende and Mohamed's do


def log_normaliser(energy, limit=6.0, n=1201):
    """log Z = log of the integral of exp(-U) over [-limit, limit]^2, by a Riemann sum on an
    n x n grid (step 0.01; exp(-U) is below 1e-30 of its peak outside [-6, 6]^2 for U1-U3)."""
    g = np.linspace(-limit, limit, n)
    xx, yy = np.meshgrid(g, g)
    neg_u = -energy(np.stack([xx.ravel(), yy.ravel()], axis=1))
    top = neg_u.max()
    return float(top + np.log(np.sum(np.exp(neg_u - top)) * (g[1] - g[0]) ** 2))


# ---------------------------------------------------------------------------------------------
# Figure 6's data sets.


def two_circles(n, rng, noise=0.1):
    """Two concentric circles of radii 2 and 1 (scikit-learn's make_circles with factor 0.5,
    scaled by 2), each point on either with probability 1/2 at a uniform angle, plus isotropic
    Gaussian noise of standard deviation `noise`."""
    radius = np.where(rng.rand(n) < 0.5, 2.0, 1.0)
    angle = 2 * np.pi * rng.rand(n)
    x = radius[:, None] * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    return x + noise * rng.randn(n, 2)


def two_moons(n, rng, noise=0.1):
    """Two interleaved half circles (scikit-learn's make_moons: upper (cos a, sin a), lower
    (1 - cos a, 1/2 - sin a), a uniform in [0, pi]), Gaussian noise of standard deviation `noise`
    added, then centred at the origin and scaled by 2 (so the moons span about [-3, 3])."""
    upper = rng.rand(n) < 0.5
    angle = np.pi * rng.rand(n)
    x = np.where(upper[:, None], np.stack([np.cos(angle), np.sin(angle)], axis=1),
                 np.stack([1 - np.cos(angle), 0.5 - np.sin(angle)], axis=1))
    x = x + noise * rng.randn(n, 2)
    return 2.0 * (x - np.array([0.5, 0.25]))


DATASETS = {"two_circles": two_circles, "two_moons": two_moons}
