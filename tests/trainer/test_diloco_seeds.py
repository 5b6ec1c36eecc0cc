"""benchmarks/diloco_seeds.py end to end on a tiny budget: paired gaps, κ, byte columns."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.diloco_seeds import main  # noqa: E402
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
    codec = next(r for k, r in rows.items() if "tchunk" in k)
    assert codec["bytes_ring"] is None  # sparse: no ring
    assert (out / "progress.jsonl").read_text().count("\n") == 12
    assert (out / "partial.jsonl").read_text().count("\n") >= 4  # a line per evaluation
    assert "DiLoCo table with seeds" in (tmp_path / "R.md").read_text()
