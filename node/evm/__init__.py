"""EVM side of settlement: deployment, checkpoint submission, claims (web3.py)."""
