"""The provider/verifier worker (``loconet provider run``): follows the chain, trains, commits,
serves, reveals, verifies and attests on its own. worker.py has the loop and the duties,
follow.py the websocket and node fallback, ml.py the trainer calls, progress.py the crash-safe
record of what it did."""
