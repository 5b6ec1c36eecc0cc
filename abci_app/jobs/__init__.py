"""jobs: training jobs and their escrow, the round phase machine (draw, commit, challenge,
reveal, verdict, attest, finalize), rewards and provider slashing for round duties."""
