# loconet — the two commands a new user needs: `make demo` and `make test`.
PY := .venv/bin/python
PYTEST_ARGS ?=

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

lint: setup          ## ruff + mypy over the chain and the node (not part of `make test`)
	@$(PY) -m pip install -q -e '.[dev]'
	@$(PY) -m ruff check abci_app node
	@$(PY) -m mypy abci_app node

clean:
	rm -rf .venv .bin abci_app/codec/gen .loconet-demo .loconet-demo-node
