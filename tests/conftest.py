"""The MNIST tests read the four files from $NEURAL_ODES_DATA (`make test` sets it); without them
those tests are skipped."""
