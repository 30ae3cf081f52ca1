# megasched: `make test` and `make demo` each install what is missing (Debian packages, when run as
# root; otherwise they print the apt-get line and stop), configure, build and run.
BUILD ?= build
JOBS ?= $(shell nproc)
# OpenMPI builds and tests `loop --mpi` (-DMEGASCHED_MPI=ON); a plain cmake build needs no MPI.
CMAKE_FLAGS ?= -DMEGASCHED_MPI=ON
PKGS := cmake g++ make nlohmann-json3-dev libeigen3-dev libcli11-dev libgtest-dev libbenchmark-dev \
        zlib1g-dev libopenmpi-dev openmpi-bin

.PHONY: all deps configure build test demo bench clean format

all: build

deps:
	@./scripts/ensure_deps.sh $(PKGS)

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	./scripts/demo.sh $(BUILD)

# The Google Benchmark programs (device_bench is the GPU matrix driver and precision_bench the bf16
# accuracy table of dev/bf16_precision.md, both with their own flags; the GPU ones skip each case
# without a device).
bench: build
	@for b in $(BUILD)/*_bench; do case "$$(basename $$b)" in device_bench|precision_bench) continue;; esac; \
	  echo "== $$b"; $$b --benchmark_min_time=0.05 || exit 1; done

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cuh')

clean:
	rm -rf $(BUILD)
