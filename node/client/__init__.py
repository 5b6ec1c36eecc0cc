"""What a client of a loconet chain needs, with no command line: the RPC client (``rpc``), the
light client and its trust anchor (``light``, ``trust``, ``proofs``), message builders and
sending (``market_msgs``, fees in ``fees``), keys (``keys``, ``settlement_key``), the client's
config (``config``), job inputs, units and input files."""
