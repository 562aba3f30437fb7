# The two commands (README): `make demo` runs the main job on the embedded default, `make test` the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build of torch for machines without a GPU; GPU hosts set KT_TORCH_SPEC to their build.
KT_TORCH_SPEC ?= torch==2.13.0

.PHONY: setup demo test
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(KT_TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[gpu,agents,test]'
	touch $@

demo: setup
	$(VENV)/bin/kerneltune demo

test: setup
	$(PY) -m pytest -q -p no:cacheprovider
