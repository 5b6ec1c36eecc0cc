"""The block explorer: ``loconet explorer`` (server.py), data from RPC with proofs (data.py), SVG
charts (svg.py)."""
