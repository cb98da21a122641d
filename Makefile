# The front door. `make test` is what CI runs; every target installs what is missing first.
#   make test     install deps, configure, build, run every test (ctest), print the summary
#   make build    install deps, configure, build
#   make format   clang-format every C++ file we own
#   make lint     install deps, configure, check formatting and script syntax (no build)
#   make clean    remove the build directory
#   make run      install deps, build, start the stack on the default model (foreground)
#   make images   build the container images (needs a Docker engine; deploy/docker/Dockerfile)
#   make bench    the serving benchmark: two workers and a gateway on the small model, a rate sweep
#   make fuzz     coverage-guided fuzzing of every tests/fuzz target (clang), FUZZ_SECONDS each
#   make test-sanitize  the whole suite under ASan + UBSan + LSan (clang, the fuzz build's tree)
#   make test-tsan      the concurrency-heavy tests under ThreadSanitizer (clang, label tsan)
#   make fuzz-ci        every fuzz target on its seeds, then FUZZ_CI_SECONDS of fuzzing (CI)

BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
CUDA ?= AUTO
SANITIZE ?=
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
# --build-only: install what building needs, not the test tools (the container images use it).
DEPS_FLAGS ?=
VERSION := $(shell sed -n 's/^project.llmserve VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
IMAGE_PREFIX ?= llmserve
# Tests that need shared data (tokenizer vocabularies) find it here; CI sets it when it exists.
export LLMSERVE_TESTDATA ?= $(if $(wildcard ../shared/testdata),$(abspath ../shared/testdata),)

.PHONY: all deps configure build test format lint clean run images bench

all: build

deps:
	@bash scripts/install-deps.sh $(DEPS_FLAGS)

$(BUILD_DIR)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DLLMSERVE_CUDA=$(CUDA) -DLLMSERVE_SANITIZE=$(SANITIZE) $(CMAKE_ARGS)

configure: deps $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@bash scripts/run-tests.sh $(BUILD_DIR) $(JOBS)

format:
	@git ls-files '*.h' '*.cc' '*.cu' '*.cuh' | xargs -r clang-format -i
	@echo "formatted"

lint: configure
	@bash scripts/lint.sh

clean:
	rm -rf $(BUILD_DIR)

run: build
	@bash scripts/run-stack.sh $(BUILD_DIR)

# llmserve-bench over the gateway's OpenAI API at a sweep of rates: a table, bench/results.json and
# bench/sweep.png (scripts/bench.sh; BENCH_RATES, BENCH_REQUESTS, ... there).
bench: build
	@bash scripts/bench.sh $(BUILD_DIR)

# The gateway, CPU worker and CUDA worker images, tagged with the project version.
images:
	@bash deploy/docker/build-images.sh $(IMAGE_PREFIX) $(VERSION)

# Builds the libFuzzer targets with clang (ASan + UBSan, the whole project instrumented for
# coverage; scripts/configure-sanitizer-build.sh) in FUZZ_BUILD_DIR and runs each for
# FUZZ_SECONDS on FUZZ_BUILD_DIR/corpus/<name>, seeded from tests/fuzz/seeds/<name>; prints one
# JSON line per target (executions, exec/s) and fails on a crash. FUZZ_TARGETS picks some (e.g.
# FUZZ_TARGETS="jwt_fuzz http_request_fuzz"); FUZZ_ARGS adds libFuzzer flags.
FUZZ_SECONDS ?= 60
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_JOBS ?= 2
FUZZ_TARGETS ?=
FUZZ_ARGS ?=
.PHONY: fuzz
fuzz: deps
	@FUZZ_ARGS="$(FUZZ_ARGS)" bash tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS) $(FUZZ_JOBS) $(FUZZ_TARGETS)

# Sanitizers (docs/building.md, "Sanitizers"). test-sanitize builds the whole project in
# FUZZ_BUILD_DIR, the tree `make fuzz` uses (clang, ASan + UBSan + coverage), and runs every test
# in it; fuzz-ci then runs each fuzz target there for FUZZ_CI_SECONDS after its seeds. test-tsan
# builds and runs the tests labelled tsan with clang and ThreadSanitizer in TSAN_BUILD_DIR.
TSAN_BUILD_DIR ?= build-tsan
FUZZ_CI_SECONDS ?= 15
.PHONY: test-sanitize test-tsan fuzz-ci
test-sanitize: deps
	@bash scripts/run-sanitized-tests.sh $(FUZZ_BUILD_DIR) $(JOBS)

test-tsan: deps
	@bash scripts/run-tsan-tests.sh $(TSAN_BUILD_DIR) $(JOBS)

fuzz-ci: deps
	@FUZZ_ARGS="$(FUZZ_ARGS)" bash tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD_DIR) $(FUZZ_CI_SECONDS) $(FUZZ_JOBS) $(FUZZ_TARGETS)
