"""slashing module."""
