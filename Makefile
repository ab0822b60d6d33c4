# The two commands of a fresh machine: `make demo` and `make test`.
# Both install what is missing (scripts/install.sh, idempotent) and build.
BUILD   ?= build
SHARED  ?= ../shared
JOBS    ?= $(shell nproc)

.PHONY: all install configure build test demo bench clean

all: build

install:
	@bash scripts/install.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

configure: $(BUILD)/build.ninja

build: install configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	python3 $(SHARED)/tools/check_layering.py .

demo: build
	@bash examples/demo.sh $(BUILD)

bench: build
	python3 benchmarks/vm_dispatch.py --build $(BUILD)
	python3 benchmarks/tracer.py --build $(BUILD)
	python3 benchmarks/symbolic.py --build $(BUILD)
	python3 benchmarks/codegen.py --build $(BUILD)

clean:
	rm -rf $(BUILD)
