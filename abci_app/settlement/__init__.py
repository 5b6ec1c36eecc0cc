"""settlement: validator-signed checkpoints and withdrawals to an EVM chain (README.md)."""
