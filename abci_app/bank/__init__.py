"""bank: balances, transfers, total supply, fees."""
