"""rewards: how a round's reward and verifier share are split (pure integer maths)."""
