"""node.local.testnet_market.final_stats: each worker's stats.json once every worker wrote the round
final (benchmarks/round_overhead.py and traffic.py read the figures with it)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from node.local.manifest import WorkerInfo
from node.local.testnet_market import final_stats


def _worker(tmp: Path, i: int) -> WorkerInfo:
    d = tmp / f"provider{i}"
    d.mkdir()
    return WorkerInfo(f"provider{i}", f"provider{i}", f"loco{i}", str(d), 0, [])


def _write(w: WorkerInfo, rounds: dict) -> None:
    (w.path / "stats.json").write_text(json.dumps({"rounds": rounds}))


def test_waits_until_every_worker_wrote_the_round_final(tmp_path: Path) -> None:
    a, b = _worker(tmp_path, 0), _worker(tmp_path, 1)
    _write(a, {"1/3": {"finalized": 1.0}})
    _write(b, {"1/3": {"seen": 1.0}})  # not final yet
    later = threading.Timer(1.5, _write, (b, {"1/3": {"seen": 1.0, "finalized": 2.0}}))
    later.start()
    t0 = time.monotonic()
    stats = final_stats([a, b], "1/3", timeout=60)
    later.join()
    assert time.monotonic() - t0 >= 1.0  # it waited for b
    assert stats["loco1"]["rounds"]["1/3"]["finalized"] == 2.0
    assert set(stats) == {"loco0", "loco1"}


def test_gives_what_was_written_after_the_timeout(tmp_path: Path) -> None:
    a, b = _worker(tmp_path, 0), _worker(tmp_path, 1)
    _write(a, {"1/3": {"finalized": 1.0}})
    for damaged in ("{not json", "[1, 2]", '"text"', "null"):  # half-written, another shape
        (b.path / "stats.json").write_text(damaged)
        stats = final_stats([a, b], "1/3", timeout=0.1)
        assert set(stats) == {"loco0"}, damaged
