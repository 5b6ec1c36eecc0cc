"""benchmarks/diloco_seeds.py end to end on a tiny budget: paired gaps, κ, byte columns."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.diloco_seeds import byte_columns, check_device, main, recount  # noqa: E402
from trainer.data import synthetic_text  # noqa: E402
from trainer.netmodel import allreduce_step_bytes  # noqa: E402


def test_seeded_table_tiny(tmp_path, capsys):
    data = tmp_path / "d.txt"
    data.write_bytes(synthetic_text(30_000, seed=2))
    out = tmp_path / "out"
    assert (
        main(
            [
                "--data",
                str(data),
                "--steps",
                "12",
                "--H",
                "4",
                "--seeds",
                "0,1",
                "--batch-size",
                "2",
                "--ar-lrs",
                "3e-3,6e-3",
                "--outer",
                "0.7:0.9,1.0:0.0:6e-3",  # the second entry with its own inner lr
                "--kappa-mult",
                "2",
                "--kappa-outer",
                "0.7:0.9",
                "--codecs",
                "tchunk:8/64+int2@1.0:0:0.95",
                "--out",
                str(out),
                "--jobs",
                "1",
                "--results",
                str(tmp_path / "R.md"),
            ]
        )
        == 0
    )
    res = json.loads((out / "table.json").read_text())
    rows = {r["group"] + r["run"]: r for r in res["rows"]}
    assert len(res["rows"]) == 6
    assert any("inner lr 0.006" in r["run"] for r in res["rows"])
    kap = next(r for r in res["rows"] if r["group"] == "κ")
    assert kap["runs"]["0"]["config"]["steps"] == 24 and kap["steps_mult"] == 2
    base = min((r for r in res["rows"] if r["group"] == "a"), key=lambda r: r["loss"])
    P, W = res["n_params"], res["workers"]
    assert res["allreduce_bytes"] == pytest.approx(12 * allreduce_step_bytes(P, W, 4))
    for r in res["rows"]:
        if r["group"] == "a":
            continue
        for i, s in enumerate(("0", "1")):  # the gap is paired with that seed's baseline
            a = base["runs"][s]["final_val_loss"]
            assert r["gaps"][i] == pytest.approx(100 * (r["runs"][s]["final_val_loss"] - a) / a)
        assert r["bytes_allgather"] == (W - 1) * r["bytes_upload"]
        assert r["reduction_with_reveal"] < r["reduction"]
        assert r["reduction_round"] < r["reduction_with_reveal"]
        if r["group"] in ("b", "κ"):  # uncompressed fp32: the one payload a ring sums
            assert r["sync_mode"] == "ring" and r["bytes_sync"] == r["bytes_ring"]
    codec = next(r for k, r in rows.items() if "tchunk" in k)
    assert codec["bytes_ring"] is None  # sparse: no ring
    assert (out / "progress.jsonl").read_text().count("\n") == 12
    assert (out / "partial.jsonl").read_text().count("\n") >= 4  # a line per evaluation
    assert "DiLoCo table with seeds" in (tmp_path / "R.md").read_text()


RECORDED = Path(__file__).resolve().parents[2] / "benchmarks/diloco_seeds_runs"


def test_byte_columns_count_ring_only_for_dense_floats():
    kw = {"upload": 1000.0, "rounds": 10, "n_params": 100, "workers": 4, "allreduce": 6e6}
    fp32 = byte_columns(codec="none", **kw)
    assert fp32["sync_mode"] == "ring" and fp32["bytes_sync"] == 1500  # 2(W-1)/W x
    for codec in ("int8", "int4", "int2", "lowrank:4+int8", "stride:1+int2", "chunk:8/64+int2"):
        c = byte_columns(codec=codec, **kw)
        assert c["sync_mode"] == "all-gather" and c["bytes_ring"] is None
        assert c["bytes_sync"] == 3000  # (W-1) x
        assert c["reduction"] == 6e6 / 3000
    # other = rounds x (txs + (W-1) fetch heads + share x 8 B/param)
    assert fp32["bytes_other"] == 10 * (930 + 3 * 528 + 0.5 * 8 * 100)
    assert fp32["reduction_round"] == pytest.approx(
        6e6 / (1500 + fp32["bytes_reveal"] + fp32["bytes_other"])
    )
    assert byte_columns(codec="none", sitout_share=0.0, **kw)["bytes_other"] == 10 * 2514


def test_recount_of_the_recorded_h100_table():
    # Table C as recorded credited int4 with ring bytes (662x); counted as an all-gather it is
    # AllReduce / (3 x upload) = 331x, and uncompressed DiLoCo keeps its ring (99x)
    res = recount(json.loads((RECORDED / "h100_60rounds_seeds3.json").read_text()))
    rows = {r["run"]: r for r in res["rows"]}
    int4 = rows["DiLoCo H=100 + int4, outer lr 0.7, momentum 0.9, EF 1"]
    assert int4["bytes_upload"] == 1_553_940 and int4["sync_mode"] == "all-gather"
    assert int4["reduction"] == pytest.approx(1_543_680_000 / (3 * 1_553_940))
    assert round(int4["reduction"]) == 331
    fp32 = rows["DiLoCo H=100, outer lr 0.7, momentum 0.9, inner lr 0.006"]
    assert fp32["sync_mode"] == "ring" and round(fp32["reduction"]) == 99
    kappa = next(r for r in res["rows"] if r["group"] == "κ")  # 2x the steps, 2x the bytes
    assert kappa["reduction"] == pytest.approx(fp32["reduction"])


def test_invalid_cuda_without_a_gpu_names_the_fix(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="--device cpu"):
        check_device("cuda")
    with pytest.raises(SystemExit, match="no CUDA device"):
        main(["--device", "cuda", "--quick"])
    check_device("cpu")  # nothing to check
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    check_device("cuda:0")
    with pytest.raises(SystemExit, match="1 CUDA device"):
        check_device("cuda:1")
