# minipt2: the two commands in README.md are `make demo` and `make test`.
# Both create .venv on first use and install the project (editable) with its pins.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo test setup browser book bench clean

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "minipt2 needs Python 3.11+"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m driver compile

test: $(STAMP) browser
	$(PY) -m ruff check .
	$(PY) -m pytest -n $(PYTEST_WORKERS)
	$(PY) -m driver exercise verify
	$(MAKE) book

# Headless Chromium for the HTML report's test: Debian's package, where apt-get is allowed.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
	  >/dev/null 2>&1; } || echo "note: no chromium; the report's browser test will be skipped"

book: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --config-file book/mkdocs.yml

bench: $(STAMP)
	$(PY) -m driver bench

clean:
	rm -rf $(VENV) book/site book/generated
