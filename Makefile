# One entry point for set-up, the main job, the tests and lint. Every target installs what it needs.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SYSTEM_PACKAGES := debootstrap faketime iptables iproute2 chromium chromium-driver openssh-client

.PHONY: setup system venv images run test lint clean

setup: system venv

system:
	@bash .ci/system-packages.sh $(SYSTEM_PACKAGES)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

images: setup
	$(VENV)/bin/schemachaos images build

run: setup
	$(VENV)/bin/schemachaos run --time-limit 60 --nemesis-interval 6

test: setup
	$(VENV)/bin/schemachaos images build
	$(VENV)/bin/python -m pytest -q -ra

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy schemasync harness nemesis workloads checker reports
	$(VENV)/bin/lint-imports --no-cache --no-logo

clean: venv
	$(VENV)/bin/schemachaos clean
