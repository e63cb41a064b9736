# The two commands a newcomer needs: `make demo` and `make test`. Both build .venv on first use.
PY ?= .venv/bin/python
VENV_STAMP = .venv/.installed

.PHONY: demo test venv lint bench-compile clean

$(VENV_STAMP): pyproject.toml
	@test -x $(PY) || PYENV_VERSION=3.12.1 python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,models,dev,torch]"
	@touch $(VENV_STAMP)

venv: $(VENV_STAMP)

demo: $(VENV_STAMP)
	$(PY) -m luminal.demo

test: $(VENV_STAMP)
	$(PY) -m pytest tests -n 2 -p no:cacheprovider; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

lint: $(VENV_STAMP)
	$(PY) -m ruff check luminal tests bench
	$(PY) -m ruff format --check luminal tests

bench-compile: $(VENV_STAMP)
	$(PY) bench/compile.py

clean:
	rm -rf .venv .pytest_cache .hypothesis
