"""benchmarks/projection_107b.py: only dense floats get a ring; int4 among 20 nodes is ~45x."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.projection_107b import main, sync_mode  # noqa: E402


def test_only_dense_floats_get_ring_rows(capsys):
    assert main([]) == 0
    rows = [ln.split(" | ") for ln in capsys.readouterr().out.splitlines() if ln.startswith("| ")]
    ring = {r[0].lstrip("| ") for r in rows if len(r) > 2 and r[2] == "ring"}
    assert ring == {"dense+fp16"}
    for c in ("dense+int8", "dense+int4", "dense+int2", "stride:1+int2", "lowrank:64+int4"):
        assert sync_mode(c) == "allgather"
    # dense int4 all-gathered among 20 nodes: ~45x over per-step bf16 AllReduce, not 445x
    int4 = next(r for r in rows if r[0] == "| dense+int4" and r[2] == "allgather")
    assert [x.strip() for x in int4[3:8]] == ["44x", "45x", "45x", "45x", "45x"]


def test_sitout_share_adds_base_model_downloads(capsys):
    assert main(["--sitout-share", "0.5"]) == 0
    out = capsys.readouterr().out
    # 0.5 x 8 B/param x 107e9 = 428 GB a round per worker each way
    assert "other bytes at sit-out share 0.5: 428.0 GB a round per worker each way" in out
