"""staking: the validator set (foundation: from genesis; bonding arrives with the staking issue)."""
