# ferry — top-level entry points. `make demo` and `make test` work on a fresh Debian machine:
# they install what they need (apt packages, a pinned venv) before building.

BUILD      ?= build
BUILD_SAN  ?= build-asan
VENV       ?= .venv
PYTHON     ?= python3
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)

APT_BUILD  = cmake gcc make libcjson-dev libcmocka-dev
APT_TEST   = $(APT_BUILD) clang libclang-rt-14-dev

.PHONY: all build build-asan demo test test-c test-python deps-build deps-test venv bench clean

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

# The venv is rebuilt whenever the pinned list changes.
$(VENV)/.stamp: requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements-test.txt
	touch $@

venv: $(VENV)/.stamp

demo: build
	$(BUILD)/ferry export fixtures/tiny-llama $(BUILD)/demo-onnx --format onnx --dynamic --force
	$(BUILD)/ferry inspect $(BUILD)/demo-onnx

test: build build-asan venv
	$(MAKE) test-c test-python

test-c:
	cd $(BUILD_SAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j $(JOBS)

test-python:
	FERRY_BUILD=$(abspath $(BUILD)) FERRY_BUILD_SAN=$(abspath $(BUILD_SAN)) \
		$(VENV)/bin/python -m pytest -n $(JOBS) -q tests/python

bench: build venv
	$(VENV)/bin/python bench/export_bench.py

clean:
	rm -rf $(BUILD) $(BUILD_SAN)
