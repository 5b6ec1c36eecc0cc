"""`loconet train simulate` as a user runs it (issue 13 item 5): --device, per-step progress with
an ETA, checkpoint and resume (the resumed run ends on the uninterrupted run's model hash),
readable plots, and one-line errors instead of tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--workers", "2", "--inner-steps", "2", "--model-size", "tiny", "--batch-size", "2",
        "--compression", "topk:0.05+int8"]


def train(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "node.cli", "train", "simulate", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, check=False)


@pytest.mark.slow
def test_resume_ends_where_an_uninterrupted_run_ends(tmp_path):
    full = train(*TINY, "--rounds", "3", "-o", "json")
    assert full.returncode == 0, full.stderr
    ck = tmp_path / "ck.safetensors"
    part = train(*TINY, "--rounds", "2", "--checkpoint", str(ck))
    assert part.returncode == 0 and ck.is_file(), part.stderr
    # text mode: per-step progress with an ETA (no terminal: a line every 5 s and at the end)
    assert "step 8/8 (100%)" in part.stderr and "ETA" in part.stderr and "steps/s" in part.stderr
    resumed = train(*TINY, "--rounds", "3", "--checkpoint", str(ck), "--resume", "-o", "json")
    assert resumed.returncode == 0, resumed.stderr
    a, b = json.loads(full.stdout), json.loads(resumed.stdout)
    assert b["final_model_hash"] == a["final_model_hash"]
    assert [r["model_hash"] for r in b["rounds"]] == [r["model_hash"] for r in a["rounds"]]
    # other settings than --rounds/--device/--threads: refused, naming them
    other = train(*[x if x != "topk:0.05+int8" else "topk:0.1+int8" for x in TINY], "--rounds", "3",
                  "--checkpoint", str(ck), "--resume")
    assert other.returncode == 2 and "compression" in other.stderr and "Traceback" not in other.stderr
    done = train(*TINY, "--rounds", "3", "--checkpoint", str(ck), "--resume")
    assert done.returncode == 2 and "already at round 3" in done.stderr


@pytest.mark.slow
def test_plots_and_outputs(tmp_path):
    r = train(*TINY, "--rounds", "2", "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    for f in ("log.json", "val_loss.png", "bytes_per_round.png", "checkpoint.safetensors", "segment/segment.json"):
        assert (tmp_path / "run" / f).is_file(), f
    assert "device cpu" in r.stderr


def test_bad_inputs_are_one_line_errors(tmp_path):
    r = train("--data", str(tmp_path / "missing.txt"), *TINY, "--rounds", "1")
    assert r.returncode == 2 and "--data" in r.stderr and "Traceback" not in r.stderr
    r = train(*TINY, "--rounds", "1", "--device", "tpu")
    assert r.returncode == 2 and "cpu, cuda" in r.stderr
    r = train(*TINY, "--rounds", "0")
    assert r.returncode == 2 and "--rounds" in r.stderr
    r = train(*TINY, "--rounds", "1", "--resume")
    assert r.returncode == 2 and "--checkpoint" in r.stderr
    r = train(*TINY, "--rounds", "3", "--checkpoint", str(tmp_path / "none.safetensors"), "--resume")
    assert r.returncode == 2 and "no checkpoint" in r.stderr


def test_cuda_refused_where_there_is_none():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    r = train(*TINY, "--rounds", "1", "--device", "cuda")
    assert r.returncode == 2 and "no CUDA device" in r.stderr


def test_plot_axes_are_readable(tmp_path):
    """Rounds on the x axis are integers from 1 (0 = the initial model on the loss plot); the
    byte axis is logarithmic with labelled 1-2-5 ticks in B/kB/MB."""
    import matplotlib

    matplotlib.use("Agg")
    from trainer.cli import plot_run

    rounds = [{"round": i, "val_loss": 5 - i * 0.1, "train_loss": 5.1 - i * 0.1, "tokens": 100 * (i + 1),
               "bytes_per_worker": 900 * (i + 1) ** 3} for i in range(6)]
    log = {"config": {"workers": 2, "inner_steps": 4, "compression": "topk:0.01+int4", "overlap": False,
                      "batch_size": 2, "seed": 0}, "n_params": 10_000, "tokens": 600,
           "val_curve": [{"tokens": 0, "val_loss": 5.5}], "rounds": rounds}
    captured = {}
    import matplotlib.figure

    real = matplotlib.figure.Figure.savefig

    def spy(self, fname, *a, **kw):
        ax = self.axes[0]
        self.canvas.draw()
        captured[Path(fname).name] = (ax.get_xticks(), [t.get_text() for t in ax.get_yticklabels()], ax.get_yscale(),
                                      ax.get_title())
        return real(self, fname, *a, **kw)

    matplotlib.figure.Figure.savefig = spy
    try:
        plot_run(log, tmp_path)
    finally:
        matplotlib.figure.Figure.savefig = real
    xt, _, _, title = captured["bytes_per_round.png"]
    visible = [x for x in xt if 0.4 <= x <= 6.6]
    assert all(float(x).is_integer() for x in visible) and min(visible) >= 1
    _, ylabels, scale, _ = captured["bytes_per_round.png"]
    assert scale == "log" and sum(bool(t) for t in ylabels) >= 3 and any("kB" in t for t in ylabels)
    assert "2 workers" in title and "topk:0.01+int4" in title
    xt, _, _, title = captured["val_loss.png"]
    assert all(float(x).is_integer() for x in xt) and "H=4" in title


def test_json_errors_are_json(tmp_path):
    r = train("--data", str(tmp_path / "missing.txt"), *TINY, "--rounds", "1", "-o", "json")
    assert r.returncode == 2 and "--data" in json.loads(r.stdout)["error"]
