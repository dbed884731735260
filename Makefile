# tslock-django: `make demo` shows the lock at work, `make test` runs everything CI runs.
# Both work from a fresh clone: they create .venv and install what they need.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
WORKER := tslock_django/worker
STAMP  := $(VENV)/.installed-stamp
# What ruff reads: the Python sources (not the Markdown, whose examples are excerpts).
PY_SOURCES := $(wildcard tslock_django tests testproject bench tools docs manage.py)

.PHONY: demo test docs lint typecheck unit venv npm wrangler system-packages browser mysqlclient bench clean matrix matrix-ends check-install

$(STAMP): pyproject.toml
	@echo "make: installing tslock-django and its test tools into $(VENV) (about a minute, first run only)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	# The bench group too: make test runs the benchmarks' quick smoke run; and the docs
	# group, for make docs (Sphinx 9 needs Python 3.11 or later, as this venv is).
	$(PY) -m pip install --quiet --group test --group bench --group docs -e .
	touch $@

venv: $(STAMP)

# The Workers runtime (Miniflare + workerd) for the Durable Object Worker's tests.
$(WORKER)/node_modules/.package-lock.json: $(WORKER)/package-lock.json
	@echo "make: installing the Workers runtime into $(WORKER)/node_modules (npm ci, about 165 MB)"
	npm ci --prefix $(WORKER) --no-audit --no-fund --loglevel=error

npm: $(WORKER)/node_modules/.package-lock.json

# wrangler, for the test that its dry run bundles the exported Worker folder as users deploy it
# (tools/wrangler, never shipped; about 195 MB).
WRANGLER := tools/wrangler
$(WRANGLER)/node_modules/.package-lock.json: $(WRANGLER)/package-lock.json
	npm ci --prefix $(WRANGLER) --no-audit --no-fund --loglevel=error

wrangler: $(WRANGLER)/node_modules/.package-lock.json

# System packages, all in one apt-get, before anything runs in parallel: two apt-gets at once
# fail on dpkg's lock ("Could not get lock /var/lib/dpkg/lock-frontend"). Debian's Chromium for
# the admin's end-to-end test (Playwright drives it; it never downloads a browser of its own),
# and the MariaDB client headers that mysqlclient builds against. Nothing is installed when all
# are present; `make -n test` shows this step before the parallel one.
SYSTEM_PACKAGES_MISSING = $(strip \
  $(if $(shell command -v chromium 2>/dev/null),,chromium) \
  $(if $(shell pkg-config --exists libmariadb 2>/dev/null && echo yes),,libmariadb-dev pkg-config))
system-packages:
	@missing="$(SYSTEM_PACKAGES_MISSING)"; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing Debian packages: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

browser: system-packages

# mysqlclient for the MariaDB tests and benchmarks, built against Debian's MariaDB client
# headers (installed by system-packages).
mysqlclient: venv system-packages
	@$(PY) -c "import MySQLdb" 2>/dev/null || { \
	  echo "make: building mysqlclient into $(VENV)"; \
	  $(PY) -m pip install --quiet --group mysqlclient; }

lint: venv
	$(VENV)/bin/ruff check $(PY_SOURCES)
	$(VENV)/bin/ruff format --check $(PY_SOURCES)

typecheck: venv
	$(VENV)/bin/mypy tslock_django

# The suite in PYTEST_JOBS processes (pytest-xdist; 0: in this one). Most of its time is spent
# waiting on database servers, Workers runtimes and child processes, not on the CPU, so two
# processes halve it on CI's two cores. Tests that must not overlap one another share an
# xdist_group mark, which --dist loadgroup keeps in one process.
PYTEST_JOBS ?= 2
unit: venv npm wrangler browser mysqlclient
	$(PY) manage.py makemigrations --check --dry-run --settings=tests.settings
	$(VENV)/bin/pytest -n $(PYTEST_JOBS) --dist loadgroup --no-loadscope-reorder --cov --cov-report=term $(PYTEST_ARGS)

# The newest Django on the newest Python found (3.10-3.13), then the oldest Django on the
# oldest Python, in var/matrix: CI's guard against the versions that break first and the
# pair most users pin; it says so and passes when no interpreter is found.
matrix-ends: venv
	$(PY) -m tools.matrix --newest --oldest

# The documentation site (docs/, Sphinx + MyST + Furo) into var/docs. Strict: every warning,
# and every internal reference that does not resolve (-n), fails the build; --keep-going
# reports them all before failing. Its shell and settings examples are run by tests/test_docs.py.
docs: venv
	$(VENV)/bin/sphinx-build -W --keep-going -n -q -b html docs var/docs

# unit and matrix-ends side by side (make -j2): both spend most of their time waiting on
# servers, Workers runtimes and child processes, and the matrix prints only its table (its
# pytest output goes to var/matrix/<run>.log), so the two outputs do not interleave.
test: system-packages lint typecheck docs
	$(MAKE) --no-print-directory -j2 unit matrix-ends

# The whole matrix (Python 3.10-3.13 x Django 4.2-6.1, plus the oldest dependencies allowed);
# the table goes to var/matrix/results.md. MATRIX_ARGS narrows it, e.g.
# MATRIX_ARGS="--python 3.13 --django 6.1 --no-floor".
matrix: venv
	$(PY) -m tools.matrix $(MATRIX_ARGS)

# The built wheel installed into a fresh `django-admin startproject` (not part of `make test`:
# it downloads build tools and the runtime into a temporary folder; about 30 s).
check-install: venv
	$(PY) -m tools.check_install

demo: venv
	PROVIDER=$(PROVIDER) $(PY) testproject/run_demo.py

bench: venv npm mysqlclient
	$(PY) -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var artifacts $(WORKER)/node_modules $(WRANGLER)/node_modules .coverage
