"""``loconet``, the command line: ``main`` (the parser, the node's own commands, error
reporting; the ``loconet`` entry point is ``node.cli.main:main``) and one module per command
group (``tx``, ``market``, ``staking``, ``evm``, ``testnet``, ``blob``, ``explorer``,
``trust``; the provider worker's is ``node.worker.cli``). Library code never imports this
package (``tests/cli/test_node_layering.py``)."""
