"""The provider/verifier worker (``loconet provider run``): follows the chain, trains, commits,
serves, reveals, verifies and attests on its own. worker.py has the loop, records.py the
chain's round JSON as typed records, context.py what the duties share, one module per duty
(train.py, reveal.py, judge.py, attest.py) and upkeep.py the gc and stats.json; follow.py the
websocket and node fallback, traffic.py the node link's byte counts, ml.py the trainer calls,
duties.py the duty threads, progress.py the crash-safe record of what it did."""
