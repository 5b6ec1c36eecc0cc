# loconet — the two commands a new user needs: `make demo` and `make test`.
PY := .venv/bin/python
PYTEST_ARGS ?=
# every package lint covers (ruff reads its rules, mypy its file list, from pyproject.toml)
LINT_PATHS := abci_app node trainer contracts tests benchmarks scripts

.PHONY: setup demo demo-node test test-fast bench lint clean

setup:                ## venv + deps, cometbft built with go install into .bin/, protobuf stubs
	@./scripts/setup.sh

demo: setup           ## the network: 4 validators, 3 honest provider workers + 1 cheater train a job; fraud slashed
	@$(PY) scripts/demo.py

demo-node: setup      ## single local node: start, send a transfer, show balances and the block, stop
	@$(PY) scripts/demo_node.py

test: setup           ## the whole suite (unit, property, socket, real-cometbft integration)
	@$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: setup      ## everything but the real-cometbft integration tests
	@$(PY) -m pytest -q -m "not integration" $(PYTEST_ARGS)

bench: setup          ## chain throughput benchmark (records in benchmarks/RESULTS.md)
	@$(PY) benchmarks/chain_tps.py

lint: setup           ## ruff check, ruff format --check and mypy over every package (CI runs it before the tests)
	@$(PY) -m ruff check $(LINT_PATHS)
	@$(PY) -m ruff format --check $(LINT_PATHS)
	@$(PY) -m mypy

clean:
	rm -rf .venv .bin abci_app/codec/gen .loconet-demo .loconet-demo-node .loconet-demo-busy
