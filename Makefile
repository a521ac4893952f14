# The two commands of the README. Each makes its own virtual environment on
# first use (MPI from the pip `mpich` wheel), so a fresh machine needs only
# Python 3.10+ and network access to PyPI.
#
#   make train            8-rank data-parallel SGD on the bundled digits set
#   make test             the whole test suite (1, 2, 3, ... ranks, each with a timeout), then
#                         again as on a GPU node (pytest --device=standin)
#
# On a cluster with its own MPI:  make EXTRAS=data,test MPIEXEC=mpiexec train

PYTHON  ?= python3
VENV    ?= .venv
EXTRAS  ?= mpich,data,test
NP      ?= 8
ARGS    ?=
PY      := $(VENV)/bin/python
MPIEXEC ?= $(if $(wildcard $(VENV)/bin/mpiexec),$(VENV)/bin/mpiexec,mpiexec)

.PHONY: train test bench venv clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $@

train: $(VENV)/.installed
	$(MAKE) --no-print-directory run-train

run-train:
	$(MPIEXEC) -n $(NP) $(PY) -m hpcgpu.train $(ARGS)

# The suite twice: as it is here, then as on a GPU node (the CuPy stand-in of
# tests/device posing as a present GPU, so --device auto takes the device path).
test: $(VENV)/.installed
	$(PY) -m pytest $(ARGS)
	$(PY) -m pytest --device=standin $(ARGS)

bench: $(VENV)/.installed
	$(PY) benchmarks/train.py $(ARGS)

clean:
	rm -rf $(VENV) results .pytest_cache
