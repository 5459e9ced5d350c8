"""The MNIST tests read the four files from $NEURAL_ODES_DATA (`make test` sets it); without them
those tests are skipped (`needs_mnist`)."""
import pytest


def have_mnist():
    from reproduce.mnist import data
    try:
        data.check(data.data_dir())
        return True
    except data.MNISTDataError:
        return False


needs_mnist = pytest.mark.skipif(not have_mnist(), reason="MNIST files not found (set "
                                 "$NEURAL_ODES_DATA to a folder holding them)")
