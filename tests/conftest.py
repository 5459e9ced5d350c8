"""Point the MNIST tests at ../shared/data/mnist (where CI keeps the files) unless
$NEURAL_ODES_DATA says otherwise; without the files those tests are skipped."""
import os

_SHARED = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data",
                                       "mnist"))
if "NEURAL_ODES_DATA" not in os.environ and os.path.isdir(_SHARED):
    os.environ["NEURAL_ODES_DATA"] = _SHARED
