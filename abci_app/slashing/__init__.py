"""slashing: downtime (missed blocks in a window) and double sign (CometBFT evidence)."""
