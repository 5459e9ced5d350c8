"""Figure 8 of the paper (Section 5): a latent ODE with a Poisson process likelihood.

experiment.py: settings, units and the protocol; data.py: the event sequences; models.py: the
latent ODE, its likelihood and its evaluation; figures.py: Figure 8 and the training curve;
report.py: the report's section.
"""
from .experiment import main, units

__all__ = ["main", "units"]
