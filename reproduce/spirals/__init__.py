"""Table 2, Figures 9 and 10 of the paper (Section 5.1): a latent ODE against two RNNs on
irregularly sampled spirals.

experiment.py: settings (TRAINING, SETTINGS), units and the protocol; data.py: the spirals;
models.py: the latent ODE, the RNN baselines and their scores; figures.py: Figures 9, 10 and the
training curves; report.py: the report's section.
"""
from .experiment import main, units

__all__ = ["main", "units"]
