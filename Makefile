# One entry point for set-up, the main job, the tests and lint. Every target installs what it needs.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SYSTEM_PACKAGES := debootstrap faketime iptables iproute2 chromium chromium-driver openssh-client

.PHONY: setup system venv images run test lint clean lock

ARCHIVE := $(VENV)/schemachaos-spark-classes.jsa

setup: system venv $(ARCHIVE)

system:
	@bash .ci/system-packages.sh $(SYSTEM_PACKAGES)

# The venv is installed from the lock file (exact versions of every package, transitive ones
# included); pyproject.toml keeps the ranges. `make lock` rewrites the lock after a change there.
$(STAMP): pyproject.toml requirements.lock
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements.lock
	$(VENV)/bin/pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

# The classes an analysis loads, archived once so that every later driver JVM maps them
# (checker/class_archive.py), made by analyzing a labelled history of the tests. Without it an
# analysis only starts slower, so a failure is reported and set-up goes on.
$(ARCHIVE): $(STAMP)
	rm -rf $(VENV)/archive-run && mkdir -p $(VENV)/archive-run
	cp tests/histories/common/* tests/histories/mixed-schema-commit/* $(VENV)/archive-run/
	$(PY) -m checker.class_archive $(VENV)/archive-run > $(VENV)/class-archive.log 2>&1 \
		|| (tail -n 20 $(VENV)/class-archive.log; echo "no class archive: see $(VENV)/class-archive.log")
	rm -rf $(VENV)/archive-run

images: setup
	$(VENV)/bin/schemachaos images build

run: setup
	$(VENV)/bin/schemachaos run --time-limit 60 --nemesis-interval 6

# The suite as two pytest processes at once: the system tests, and beside them at a lower
# priority the Spark analyses of small histories (tests/suite.sh says which is which).
test: setup
	$(VENV)/bin/schemachaos images build
	bash tests/suite.sh $(PY)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy contract schemasync harness nemesis workloads checker reports targets sim synthetic benchmarks
	$(VENV)/bin/lint-imports --no-cache --no-logo

lock: venv
	$(VENV)/bin/pip install -q pip-tools==7.6.2
	$(VENV)/bin/pip-compile -q --strip-extras --extra dev --no-emit-index-url -o requirements.lock pyproject.toml

clean: venv
	$(VENV)/bin/schemachaos clean
