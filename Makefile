# appliance: `make install` sets everything up, `make test` checks it all.
# Variables: PYTHON, VENV, LLAMA_CMAKE_ARGS, Q (question for `make run`), QUESTIONS, N, EVAL_SETS, CHECKS, BENCH_LLM_FLAGS.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python

# llama.cpp build flags. The default is an AVX2 build, plus the AVX-512 extensions this CPU
# reports (read from /proc/cpuinfo; prompt evaluation ~1.3x faster with them), never AMX: a
# native build crashes on CPUs that report AMX to programs that may not use it (as on many
# virtual machines).
#   NVIDIA GPU:  make install LLAMA_CMAKE_ARGS="-DGGML_CUDA=on"
#   Apple Metal: make install LLAMA_CMAKE_ARGS="-DGGML_METAL=on"
#   this CPU, fully optimised (bare metal only): make install LLAMA_CMAKE_ARGS="-DGGML_NATIVE=ON"
# pip keeps the first build in its wheel cache: after changing the flags, install with
# PIP_NO_CACHE_DIR=1 (or run `.venv/bin/pip cache remove llama_cpp_python` first).
CPU_FLAGS := $(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
has_flag = $(filter $(1),$(CPU_FLAGS))
LLAMA_AVX512 := $(if $(and $(call has_flag,avx512f),$(call has_flag,avx512bw),$(call has_flag,avx512vl),$(call has_flag,avx512dq)),-DGGML_AVX512=ON $(if $(call has_flag,avx512_vnni),-DGGML_AVX512_VNNI=ON) $(if $(call has_flag,avx512vbmi),-DGGML_AVX512_VBMI=ON) $(if $(call has_flag,avx512_bf16),-DGGML_AVX512_BF16=ON),-DGGML_AVX512=OFF)
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON $(LLAMA_AVX512) -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_BF16=OFF

BENCH ?= ../shared/bench/musique-dev
DATASET ?= $(BENCH)
# The demo corpus ships with the project (data/demo/README.md: source and licence).
DEMO_CORPUS ?= data/demo/corpus.jsonl
Q ?=
N ?= 10

.PHONY: install venv deps models demo-corpus test run doctor bench-llm bench-sources bench-pipeline bench-votes bench-plan bench-peers clean batch eval ablate

install: deps models demo-corpus ## virtual environment, every dependency, the default models, the demo corpus
	@$(BIN)/appliance doctor || true

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

venv: $(BIN)/python

# llama-cpp-python compiles llama.cpp (several minutes once; pip's wheel cache makes later installs quick).
deps: venv
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install "llama-cpp-python==0.3.36"
	$(BIN)/pip install -e '.[test]'

models: deps
	$(PY) scripts/fetch_models.py

demo-corpus: venv
	@test -f $(DEMO_CORPUS) || { echo "error: no demo corpus at $(DEMO_CORPUS): restore it with git checkout -- data/demo or name one with make install DEMO_CORPUS=FILE" >&2; exit 2; }
	$(BIN)/appliance corpus add $(DEMO_CORPUS) --name default

test: ## the type check, then the whole test suite (real model, real LanceDB, real SearXNG on loopback)
	$(PY) -m mypy
	$(if $(wildcard $(BENCH)),TEST_BENCH_DIR="$(abspath $(BENCH))") $(PY) -m pytest tests --durations=25

run: ## make run Q="your question"
	@test -n "$(Q)" || { echo 'usage: make run Q="your question"' >&2; exit 2; }
	$(BIN)/appliance research "$(Q)"

doctor:
	$(BIN)/appliance doctor

# Raw generation vs the previous grammar path vs the engine, per contract, for every model of
# the manifest (BENCH_LLM_FLAGS="--reps 5", "--models NAME", "--manifest PATH").
bench-llm:
	$(PY) scripts/bench_llm.py $(BENCH_LLM_FLAGS)

bench-sources:
	$(PY) scripts/bench_sources.py

bench-pipeline:
	$(PY) scripts/bench_pipeline.py --limit $(N)

# Verification alone: the labelled vote set (tests/data/votes.jsonl) through each model's votes.
bench-plan:
	$(PY) scripts/bench_plan.py $(if $(N),--limit $(N))

bench-votes:
	$(PY) scripts/bench_votes.py

# llama.cpp's own OpenAI-compatible server (what GPU sites run), built from the llama.cpp source
# the pinned llama-cpp-python sdist vendors, with the same flags (not part of `make install`:
# about ten minutes on 2 cores). LLAMA_CMAKE_ARGS="-DGGML_CUDA=on" for an NVIDIA GPU.
LLAMA_SERVER_SRC := .build/llama-src/llama_cpp_python-0.3.36/vendor/llama.cpp
.PHONY: llama-server
llama-server: ## .build/llama-server/bin/llama-server
	@test -x $(BIN)/pip || { echo "error: run make install first (pip fetches the llama.cpp source)" >&2; exit 2; }
	@command -v cmake >/dev/null || { echo "error: cmake is needed (apt-get install -y cmake)" >&2; exit 2; }
	@test -d $(LLAMA_SERVER_SRC) || { mkdir -p .build/llama-src && $(BIN)/pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==0.3.36" -d .build/llama-src && tar -xzf .build/llama-src/llama_cpp_python-0.3.36.tar.gz -C .build/llama-src; }
	cmake -S $(LLAMA_SERVER_SRC) -B .build/llama-server $(LLAMA_CMAKE_ARGS) -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release
	cmake --build .build/llama-server --target llama-server -j $$(nproc)
	@echo "built .build/llama-server/bin/llama-server"

# Side by side with local-deep-research on N questions of DATASET (its own env in .build/peers;
# not part of `make test`). DRY_RUN=1 checks every set-up step without installing or running models.
bench-peers:
	LLAMA_CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) scripts/bench_peers.py --dataset $(DATASET) --n $(N) $(if $(DRY_RUN),--dry-run)

clean:
	rm -rf .build .pytest_cache

# One report per question as real make targets: `make batch QUESTIONS=examples/questions.txt`,
# `make -j2 batch ...` runs two at once; an interrupted make rebuilds only what is missing.
QUESTIONS ?= examples/questions.txt
BATCH_OUT ?= reports/batch
BATCH_FLAGS ?= --profile quick
APPLIANCE := $(abspath $(BIN))/appliance

$(BATCH_OUT)/targets.mk: $(QUESTIONS)
	@mkdir -p $(BATCH_OUT)
	$(APPLIANCE) batch $(QUESTIONS) --out $(BATCH_OUT) $(BATCH_FLAGS) --emit-make > $@.tmp && mv $@.tmp $@

batch: $(BATCH_OUT)/targets.mk
	$(MAKE) -f $(BATCH_OUT)/targets.mk APPLIANCE=$(APPLIANCE) all

# Both dev sets, every mode (pipeline, rag, iterative, closed-book), the first N questions of
# each (N=50 for all); each set's table is printed with the paired differences. Answered
# questions keep their rows: FORCE=1 answers them again (unchanged calls replay).
EVAL_SETS ?= ../shared/bench/musique-dev ../shared/bench/hotpotqa-dev
eval:
	@for set in $(EVAL_SETS); do test -f $$set/questions.jsonl || { echo "error: no dev set at $$set (questions.jsonl, corpus.jsonl): put the team's bench beside the checkout, or name the sets with make eval EVAL_SETS='DIR ...' (EVAL_SETS=data/demo: the five shipped questions)" >&2; exit 2; }; done
	@for set in $(EVAL_SETS); do $(BIN)/appliance eval $$set --limit $(N) --profile quick $(if $(FORCE),--force) || exit $$?; done

# Each check switched off in turn against all on, on both dev sets (CHECKS="id id" for some only;
# `appliance checks` lists them). Long: one pipeline run per question and check, less what replays.
ablate:
	@for set in $(EVAL_SETS); do test -f $$set/questions.jsonl || { echo "error: no dev set at $$set (questions.jsonl, corpus.jsonl): put the team's bench beside the checkout, or name the sets with make ablate EVAL_SETS='DIR ...'" >&2; exit 2; }; done
	$(BIN)/appliance ablate $(EVAL_SETS) --limit $(N) --profile quick $(foreach c,$(CHECKS),--check $(c))

.PHONY: screenshots
screenshots: ## docs/screenshots/*.png of the web view (Debian's chromium, the 135M test model)
	$(PY) scripts/web_screenshots.py
