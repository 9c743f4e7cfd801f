# Two commands do everything on a fresh machine (each installs into .venv/ first if needed):
#   make run    the default benchmark (tiny GPT, CPU, 2 ranks, local disk): its summary on a terminal,
#               the JSON report when piped or redirected
#   make test   lint + the test suite
#   make test-today   the suite's megatron-core tests on today's stack (Python 3.13, megatron-core 0.19.2) beside
#               this one: tools/today_stack.sh builds it under .today/ first (root; about 3 minutes and 6 GB, once)
# Extra arguments: make run ARGS="--tp 2 --async-save"   make test PYTEST_ARGS="-k report"

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-today install wheelhouse

install: $(STAMP)

# torch first, pinned: `torch==2.13.0` takes the local CPU build here and the CUDA build on a GPU
# machine; the constraints file then keeps every other dependency from pulling another torch.
# Quiet on stdout (`make run > r.json` is the report alone): each step is said on stderr, its output sent there.
$(STAMP): pyproject.toml constraints.txt
	@echo "installing into $(VENV)/ (first run only)" >&2
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) >&2
	@$(PY) -m pip install -q --upgrade pip >&2
	@$(PY) -m pip install -q -c constraints.txt torch >&2
	@$(PY) -m pip install -q -c constraints.txt -e '.[test]' >&2
	@touch $(STAMP)

run: $(STAMP)
	@$(PY) ckpt_launch.py $(ARGS)

# Two test processes: the end-to-end tests mostly wait on process start-up and barriers; worksteal lets
# the idle one take the other's remaining tests at the end. PYTEST_ARGS="-n 0" runs them one by one.
# The 15 slowest tests are listed at the end. The suite's budget is stated against the machine: its first
# line is tools/calibration.py's (a fixed Python loop and torch workload, seconds each, and the budget: 10
# minutes where the Python loop takes 1 s or less, scaled above). Our bytecode is compiled once
# first, for the suite's hundreds of processes (where PYTHONDONTWRITEBYTECODE is set, each would compile it
# again).
test: $(STAMP)
	$(PY) tools/calibration.py
	$(VENV)/bin/ruff check .
	$(PY) -m compileall -q ckpt_bench
	$(PY) -m pytest -q -n 2 --dist worksteal --durations=15 $(PYTEST_ARGS)

# The tests of what runs megatron-core: the built-in worker (sync, async, persistent writer, resumes on another
# layout, non-persistent tiers), every workload engine (dense and MoE, whole and subset), the projection's runs,
# the real pretrain_gpt.py (core_v0.19.0's, on this stack), the layouts sized against megatron-core's own, the
# arguments as the release's parser types them, and Primus's experiments planned.
TODAY_TESTS := tests/e2e/test_launch_e2e.py tests/e2e/test_megatron_worker.py tests/e2e/test_megatron_tiers.py \
    tests/e2e/test_workload_torch_dist.py tests/e2e/test_workload_engines.py tests/e2e/test_workload_fsdp2.py \
    tests/e2e/test_projection_runs.py tests/e2e/test_real_megatron_lm.py tests/e2e/test_msc.py \
    tests/unit/test_megatron_layout.py tests/unit/test_pipeline_layout.py tests/unit/test_global_checksums.py \
    tests/unit/test_workload_precision_aware_optimizer.py tests/unit/test_megatron_lm_framework.py \
    tests/unit/test_megatron_release.py tests/unit/test_newcomer_values.py tests/unit/test_primus_checkout.py \
    tests/unit/test_projection_settings.py tests/unit/test_deferred_compile.py tests/unit/test_sampled_assignment.py \
    tests/unit/test_megatron_state.py
test-today:
	@tools/today_stack.sh build
	tools/today_stack.sh run python tools/calibration.py
	tools/today_stack.sh run python -m pytest -q -n 2 --dist worksteal --durations=15 $(TODAY_TESTS) $(PYTEST_ARGS)

# wheelhouse/: ckpt-bench and every dependency but torch, to install into an image's own Python offline with
# `python wheelhouse/install.py` (docs/clusters.md). The target may differ from this machine; empty means this one's:
#   make wheelhouse PYTHON_VERSION=3.12 PLATFORM=manylinux_2_39_x86_64 TORCH_VERSION=2.8.0a0+5228986c39.nv25.06
# TORCH_VERSION is the image's torch as it reports it (default: constraints.txt's); IMAGE_PACKAGES=FILE, the image's
# `python -m pip list --format=freeze`, makes the wheels fit everything the image has and leaves it all out.
PYTHON_VERSION ?=
PLATFORM ?=
TORCH_VERSION ?=
IMAGE_PACKAGES ?=
WHEELHOUSE ?= wheelhouse
wheelhouse:
	$(PYTHON) tools/wheelhouse.py --out $(WHEELHOUSE) $(if $(PYTHON_VERSION),--python-version $(PYTHON_VERSION)) \
	    $(if $(PLATFORM),--platform $(PLATFORM)) $(if $(TORCH_VERSION),--torch '$(TORCH_VERSION)') \
	    $(if $(IMAGE_PACKAGES),--image-packages $(IMAGE_PACKAGES))
