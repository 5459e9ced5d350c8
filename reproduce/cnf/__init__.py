"""Figures 4 and 6 of the paper (Section 4.1): continuous normalizing flows against planar flows.

    python -m reproduce cnf [--smoke | --quick | --full] [--seed S] [--resume] [--method M]

experiment.py: settings, units and the protocol; models.py: the planar NF and the planar CNF;
data.py: Figure 4's targets and Figure 6's data; figures.py: the figures; report.py: the
report's section.
"""
from .experiment import main, units

__all__ = ["main", "units"]
