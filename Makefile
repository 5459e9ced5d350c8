# The two commands a fresh machine needs:
#   make reproduce   install, run the quick version of every experiment, evaluate the committed
#                    final weights of the full runs (MNIST, CNF, spirals, Poisson), write the report
#   make test        install, then run the test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DATA_DIR ?= $(or $(NEURAL_ODES_DATA),$(HOME)/.cache/neural-odes/mnist)

.PHONY: reproduce test install bench clean

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[tf,reproduce,dev]"
	touch $@

install: $(VENV)/.installed

test: install
	NEURAL_ODES_DATA=$(DATA_DIR) $(PY) -m pytest -q tests

reproduce: install
	NEURAL_ODES_DATA=$(DATA_DIR) $(PY) -m reproduce all --quick
	NEURAL_ODES_DATA=$(DATA_DIR) $(PY) -m reproduce mnist --full --evaluate-only
	$(PY) -m reproduce cnf --full --evaluate-only
	$(PY) -m reproduce spirals --full --evaluate-only
	$(PY) -m reproduce poisson --full --evaluate-only
	$(PY) -m reproduce report

bench: install
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/spiral_demo.py

clean:
	rm -rf $(VENV) *.egg-info
