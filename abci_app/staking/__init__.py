"""staking: validators, bonds, unbonding, validator rewards; power follows bonded stake."""
