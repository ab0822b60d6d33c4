# The two commands of a fresh machine: `make demo` and `make test`.
# Both install what is missing (scripts/install.sh, idempotent) and build.
BUILD   ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
SHARED  ?= ../shared
JOBS    ?= $(shell nproc)
# The other CPythons kiln._C is built for in the same tree (3.10, 3.12,
# 3.13: scripts/pythons.sh); `make test` runs their suites too.
EXTRA_PYTHONS ?= $(shell bash scripts/pythons.sh | paste -sd';')

.PHONY: all install configure build python test demo bench sanitize fuzz fuzz-build fuzz-coverage clean

all: build

install:
	@bash scripts/install.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release "-DKILN_EXTRA_PYTHONS=$(EXTRA_PYTHONS)"

configure: $(BUILD)/build.ninja

build: install configure
	cmake --build $(BUILD) -j $(JOBS)

# The Python package, installed editable into this Python from the same
# build tree (-C build-dir=$(BUILD); a plain pip install builds in its own,
# pyproject.toml): nothing is compiled twice,
# and afterwards `python3 -c "import kiln"` works anywhere.
python: build
	python3 -m pip install -q --no-build-isolation --root-user-action=ignore -C build-dir=$(BUILD) -e .

test: python
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@# The other CPythons' suites (tests/run_versions.sh) run on the core the
	@# 3.11 suite leaves idle; both must pass.
	bash tests/run_versions.sh $(BUILD) > $(BUILD)/run_versions.log 2>&1 & versions=$$!; \
	  python3 -m pytest tests/python -q; main=$$?; \
	  wait $$versions; other=$$?; cat $(BUILD)/run_versions.log; \
	  test $$main -eq 0 -a $$other -eq 0
	python3 $(SHARED)/tools/check_layering.py .
	python3 tools/check_runtime_layering.py .
	bash tests/install/test_install.sh $(BUILD)
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=10

demo: python
	@bash examples/demo.sh $(BUILD)

# The model zoo's full tier (docs/zoo.md): every torchvision, timm and
# transformers model of tests/python/zoo with torch._dynamo.explain re-run
# beside kiln, and every model through torch.compile(backend="kiln")
# (`make test` runs the fast tier: kiln against eager and the pins, and a
# handful through the backend).
.PHONY: zoo
zoo: python
	python3 -m pytest tests/python/zoo -m zoo_full -q

bench: build
	python3 benchmarks/vm_dispatch.py --build $(BUILD)
	python3 benchmarks/tracer.py --build $(BUILD)
	python3 benchmarks/symbolic.py --build $(BUILD)
	python3 benchmarks/codegen.py --build $(BUILD)
	python3 benchmarks/kernels.py
	python3 benchmarks/python_dispatch.py
	python3 benchmarks/python_tracing.py
	python3 benchmarks/generation.py --reps 3
	python3 benchmarks/torch_models.py --reps 5 --json $(BUILD)/bench-models.json
	python3 benchmarks/compile_scaling.py --json $(BUILD)/bench-scaling.json
	python3 benchmarks/plots.py --scaling $(BUILD)/bench-scaling.json --models $(BUILD)/bench-models.json

# AddressSanitizer + UndefinedBehaviorSanitizer: a tree of its own
# (KILN_SANITIZE=ON, cmake/sanitize.cmake), never $(BUILD); then ctest and
# pytest on it with 0 reports allowed (tests/sanitize/run.sh).
$(ASAN_BUILD)/build.ninja:
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON

sanitize: install $(ASAN_BUILD)/build.ninja
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	bash tests/sanitize/run.sh $(ASAN_BUILD) $(JOBS)

# libFuzzer targets with ASan+UBSan (cmake/fuzz.cmake, tests/fuzz/): a clang
# tree of its own with only the core libraries, then every target for
# FUZZ_SECONDS each from the checked-in corpus (`make test` runs 10 s each).
$(FUZZ_BUILD)/build.ninja:
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_FUZZ=ON \
	  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19

fuzz-build: install $(FUZZ_BUILD)/build.ninja
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

fuzz: fuzz-build python
	bash tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# Line coverage the fuzz corpora reach (tests/fuzz/coverage.sh): the targets
# again with clang's source-based coverage, run once over what `make fuzz` kept.
FUZZ_COV_BUILD ?= build-fuzz-cov
$(FUZZ_COV_BUILD)/build.ninja:
	cmake -S . -B $(FUZZ_COV_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_FUZZ=ON -DKILN_FUZZ_COVERAGE=ON \
	  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19

fuzz-coverage: install $(FUZZ_COV_BUILD)/build.ninja
	cmake --build $(FUZZ_COV_BUILD) -j $(JOBS)
	bash tests/fuzz/coverage.sh $(FUZZ_COV_BUILD) $(FUZZ_BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(FUZZ_COV_BUILD)
