"""Figures 4 and 6 of the paper (Section 4.1): continuous normalizing flows against planar flows.

    python -m reproduce cnf [--smoke | --quick | --full] [--seed S] [--resume] [--method M]

models.py: the planar NF and the planar CNF; targets.py: Figure 4's targets and Figure 6's data;
train.py: the resumable training loop; experiment.py: the protocol and results; plots.py: the
figures.
"""
from .experiment import main

__all__ = ["main"]
