"""The paper's experiments: `python -m reproduce list` names them."""
