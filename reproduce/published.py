"""The numbers the paper published (Chen et al. 2018, "Neural Ordinary Differential Equations",
NeurIPS): Table 1, Table 2, and the claims of Figures 3, 4, 6 and 8 and Section 6.

Only the experiments' report sections (reproduce/NAME/report.py) read this module: the code that
measures never sees a published number, and every measured number comes from a run of this
project's code.
"""

# Table 1 (MNIST). Test error in %, parameters in millions; memory and time as published (O()).
TABLE1 = {
    "mlp": {"test_error_pct": 1.60, "params_m": 0.24, "memory": "-", "time": "-",
            "note": "cited from LeCun et al. 1998, not run by the paper"},
    "resnet": {"test_error_pct": 0.41, "params_m": 0.60, "memory": "O(L)", "time": "O(L)"},
    "rknet": {"test_error_pct": 0.47, "params_m": 0.22, "memory": "O(L~)", "time": "O(L~)"},
    "odenet": {"test_error_pct": 0.42, "params_m": 0.22, "memory": "O(1)", "time": "O(L~)"},
}

# Figure 3 (trained ODE-Net), qualitative claims.
FIGURE3_BACKWARD_OVER_FORWARD = 0.5  # Figure 3(c): "roughly half"
FIGURE3 = {
    "a": "numerical error falls as NFE rises (tolerance controls the error)",
    "b": "forward wall time is proportional to NFE",
    "c": "backward NFE is roughly half of forward NFE",
    "d": "forward NFE grows during training",
}

# Table 2 (latent ODE on spirals): predictive RMSE on the test set.
TABLE2 = {
    "rnn": {30: 0.3937, 50: 0.3202, 100: 0.1813},
    "latent_ode": {30: 0.1642, 50: 0.1502, 100: 0.1346},
}

# Figures 4, 6 and 8: qualitative results.
FIGURE4 = "CNF reaches lower KL(q || p) than planar NF at equal K = M, on each target"
FIGURE6 = "CNF fits Two Circles and Two Moons by maximum likelihood; NF struggles on Two Moons"
FIGURE8 = "the latent ODE's learned intensity follows the events of the Poisson process"
SECTION6 = "reversing the CNF at its tolerance recovers the initial states"
