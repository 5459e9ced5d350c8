"""Table 1 and Figure 3 of the paper (Section 3): ODE-Net, RK-Net, ResNet and an MLP on MNIST.

experiment.py: settings, units and the protocol; data.py: the MNIST files; models.py: the four
models; train.py: the resumable SGD loop over epochs of batches; memory.py: peak memory of a
training step; figures.py: Figure 3, the memory figure and Table 1; report.py: the report's
section.
"""
from .experiment import main, units

__all__ = ["main", "units"]
