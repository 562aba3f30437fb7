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

# The tests run in KT_TEST_JOBS processes (pytest-xdist; each file stays in one process, so module and
# session fixtures are built once), then the tests marked `alone` by themselves: they stop servers
# the others use. Both parts always run; the target fails if either does.
KT_TEST_JOBS ?= 2
test: setup
	$(PY) -m pytest -q -p no:cacheprovider -n $(KT_TEST_JOBS) --dist loadfile --no-loadscope-reorder -m "not alone"; rc=$$?; \
	$(PY) -m pytest -q -p no:cacheprovider -m alone || rc=1; \
	exit $$rc
