# One command each: `make smoke` (a real search on the embedded dataset,
# about a minute), `make paper-question` (does the search beat random
# architectures? about 90 minutes on 2 cores; docs/evaluate_search.md;
# `make evaluation-pilot` and `make paper-question-powered` size and run the
# powered version, hours; `make retarget-question`: how far a retarget of a
# search holds, ~2 hours), `make test` (the test suite), `make bench`
# (benchmarks, JSON on stdout).
# Each creates .venv with the pinned CPU dependencies on first use.
# `make mutation` (outside CI, ~5 min) measures test strength with mutmut
# over the pure-Python modules, `make mutation-tf` with deliberate bugs in
# the TensorFlow modules; see docs/mutation.md. `make test-isa` reruns the
# float-sensitive tests under other CPU kernels (docs/testing.md).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Quiet TensorFlow's C++ start-up chatter; real warnings still show.
export TF_CPP_MIN_LOG_LEVEL ?= 1
SMOKE_DIR ?= /tmp/tunas_search_smoke
PAPER_DIR ?= /tmp/tunas_search_paper_question
PAPER_SEEDS := 1 2 3
# The powered evaluation (configs/paper_question_powered.cfg): its searches,
# the pilot's budgets, and this machine's shard (i/n).
POWERED_SEEDS ?= 1 2 3 4 5 6 7 8 9 10 11 12
PILOT_STEPS ?= 1000 3000 6000
SHARD ?= 0/1
# How far a retarget holds (`make retarget-question`): its output dir and
# targets, in the order they are run.
RETARGET_DIR ?= /tmp/tunas_search_retarget_question
RETARGET_TARGETS ?= 60 100 72
# Scratch copy of the tree that mutmut mutates, and its worker count.
MUTATION_DIR ?= build/mutation
MUTATION_JOBS ?= 1

.PHONY: venv test test-all test-isa smoke paper-question evaluation-pilot \
	paper-question-powered retarget-question bench bench-xla \
	mutation mutation-tf clean

venv: $(STAMP)

$(STAMP): setup.py requirements/cpu.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "tunas_search needs Python 3.11 (TensorFlow 2.15); set PYTHON=/path/to/python3.11"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade 'pip>=23'
	$(PY) -m pip install --quiet -c requirements/cpu.txt -e '.[cpu,plot,test]'
	touch $(STAMP)

# setup.py supports Python 3.9-3.11 (TensorFlow 2.15's range); only 3.11 is
# installed here, so the minimum is checked statically.
VERMIN := $(VENV)/bin/vermin --no-tips --violations --eval-annotations \
	--backport dataclasses -t=3.9-

# Two workers on 2 cores: much of a test's time is single-threaded (Python
# building graphs, TensorFlow starting in a subprocess). Each test file runs
# on one worker, so a module's fixtures are built once. xdist's file order
# (most tests first) stays: handing the heavy rooms out first made the two
# workers run heavy files side by side, 26 s slower (docs/benchmarks.md).
TEST_WORKERS ?= auto
test: venv
	$(VERMIN) tunas_search search_spaces bin bench tools tests
	$(PY) -m pytest -q -m 'not slow' -n $(TEST_WORKERS) --dist=loadfile tests

test-all: venv
	$(PY) -m pytest -q tests

# The tests marked float_paths (floats computed along two paths) under the
# kernels of other CPUs: oneDNN limited to AVX2 and numpy's AVX-512 loops
# off (an AVX2-only CPU), then oneDNN off with one intra-op thread (Eigen's
# kernels, reductions split otherwise). docs/testing.md, "Float tolerances".
NO_AVX512 := AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX \
	AVX512_CNL AVX512_ICL
test-isa: venv
	ONEDNN_MAX_CPU_ISA=AVX2 NPY_DISABLE_CPU_FEATURES="$(NO_AVX512)" \
	  $(PY) -m pytest -q -m 'float_paths and not slow' tests
	TF_ENABLE_ONEDNN_OPTS=0 TF_NUM_INTRAOP_THREADS=1 \
	  $(PY) -m pytest -q -m 'float_paths and not slow' tests

smoke: venv
	$(PY) bin/search.py --flagfile=configs/smoke_cpu.cfg --model_dir=$(SMOKE_DIR)

# Three searches, then searched vs random architectures (configs/
# paper_question.cfg). Rerunning resumes every step where it stopped.
paper-question: venv
	for seed in $(PAPER_SEEDS); do \
	  $(PY) bin/search.py --flagfile=configs/search_cpu.cfg --max_steps=3000 \
	    --seed=$$seed --model_dir=$(PAPER_DIR)/search-$$seed || exit 1; \
	done
	$(PY) bin/evaluate_search.py --flagfile=configs/paper_question.cfg \
	  $(foreach seed,$(PAPER_SEEDS),--search_model_dir=$(PAPER_DIR)/search-$(seed)) \
	  --output_dir=$(PAPER_DIR)/evaluation

# At which stand-alone budget do architectures of the window differ, and
# how many searches x seeds would decide (configs/evaluation_pilot.cfg;
# JSON from bench/evaluation_sizing.py). Not run yet: ~7 hours on 2 cores.
evaluation-pilot: venv
	$(PY) bin/search.py --flagfile=configs/search_cpu.cfg --max_steps=3000 \
	  --seed=1 --model_dir=$(PAPER_DIR)/search-1
	for steps in $(PILOT_STEPS); do \
	  $(PY) bin/evaluate_search.py --flagfile=configs/evaluation_pilot.cfg \
	    --search_model_dir=$(PAPER_DIR)/search-1 --train_steps=$$steps \
	    --output_dir=$(PAPER_DIR)/pilot/steps-$$steps || exit 1; \
	done
	$(PY) bench/evaluation_sizing.py --num_random=12 \
	  $(foreach steps,$(PILOT_STEPS),--evaluation=$(PAPER_DIR)/pilot/steps-$(steps))

# The powered evaluation, resumable, one shard per machine or core
# (SHARD=i/n; then `make paper-question-powered SHARD=report`): 12 searches
# x 1 seed x 20 random architectures, sized from the pilot and the random
# architectures' spread (configs/paper_question_powered.cfg).
paper-question-powered: venv
	if [ "$(SHARD)" = report ]; then \
	  $(PY) bin/evaluate_search.py --output_dir=$(PAPER_DIR)/powered \
	    --report_only; exit $$?; \
	fi; \
	for seed in $(POWERED_SEEDS); do \
	  $(PY) bin/search.py --flagfile=configs/search_cpu.cfg --max_steps=3000 \
	    --seed=$$seed --model_dir=$(PAPER_DIR)/search-$$seed || exit 1; \
	done; \
	$(PY) bin/evaluate_search.py \
	  --flagfile=configs/paper_question_powered.cfg \
	  $(foreach seed,$(POWERED_SEEDS),--search_model_dir=$(PAPER_DIR)/search-$(seed)) \
	  --output_dir=$(PAPER_DIR)/powered --shard=$(SHARD)

# How far from its target does a retarget hold? (issue 58; docs/retarget.md)
# From the powered evaluation's first search (84 ms; run if missing, bit for
# bit the same), a front of RETARGET_TARGETS, then per target a one-target
# retarget, a full 3,000-step search (seed 1) and evaluate_search of both
# against 8 random architectures of its window (configs/retarget_question.cfg);
# last, bench/retarget_vs_search.py compares them (JSON). ~35 minutes a
# target on 2 cores; every step resumes: rerun after any kill.
retarget-question: venv
	$(PY) bin/search.py --flagfile=configs/search_cpu.cfg --max_steps=3000 \
	  --seed=1 --model_dir=$(PAPER_DIR)/search-1
	$(PY) bin/search.py --retarget_from=$(PAPER_DIR)/search-1 \
	  --model_dir=$(RETARGET_DIR)/front \
	  --rl_cost_model_targets=$$(echo $(RETARGET_TARGETS) | tr ' ' ,)
	for T in $(RETARGET_TARGETS); do \
	  $(PY) bin/search.py --retarget_from=$(PAPER_DIR)/search-1 \
	    --model_dir=$(RETARGET_DIR)/retarget$$T --rl_cost_model_target=$$T \
	    || exit 1; \
	  $(PY) bin/search.py --flagfile=configs/search_cpu.cfg --max_steps=3000 \
	    --seed=1 --rl_cost_model_target=$$T --model_dir=$(RETARGET_DIR)/search$$T \
	    || exit 1; \
	  $(PY) bin/evaluate_search.py --flagfile=configs/retarget_question.cfg \
	    --search_model_dir=$(RETARGET_DIR)/retarget$$T \
	    --search_model_dir=$(RETARGET_DIR)/search$$T \
	    --output_dir=$(RETARGET_DIR)/eval$$T || exit 1; \
	done
	$(PY) bench/retarget_vs_search.py \
	  $(foreach T,$(RETARGET_TARGETS),--evaluation=$(RETARGET_DIR)/eval$(T))

# About 45 minutes on 2 cores: the search step is measured on both
# width-searched spaces at 64 and 128 pixels (issue: the sampled-width step);
# step_cost.py took ~8 minutes, and ~4 with --op_towers_only (2026-11-26).
bench: venv
	$(PY) bench/step_cost.py
	$(PY) bench/step_cost.py --image_size 28 --batch 64 --op_towers_only
	for space in proxylessnas_search mobilenet_v3_like_search; do \
	  for size in 64 128; do \
	    $(PY) bench/search_step.py --search_space=$$space --image_size=$$size || exit 1; \
	  done; \
	done
	$(PY) bench/startup.py

# XLA compile time and peak memory of each search space's step (docs/xla.md);
# minutes per space, so outside `make bench`.
bench-xla: venv
	$(PY) bench/xla_compile.py

mutation: venv
	$(PY) -m pip install --quiet -c requirements/cpu.txt -r requirements/mutation.txt
	$(PY) tests/mutation/run.py --work_dir=$(MUTATION_DIR) --jobs=$(MUTATION_JOBS)

# Deliberate bugs in the TensorFlow modules, each of which a named test must
# catch (tests/mutation/deliberate.py); needs no mutmut.
mutation-tf: venv
	$(PY) tests/mutation/deliberate.py --work_dir=$(MUTATION_DIR)-tf

clean:
	rm -rf $(VENV) .pytest_cache $(MUTATION_DIR) $(MUTATION_DIR)-tf
