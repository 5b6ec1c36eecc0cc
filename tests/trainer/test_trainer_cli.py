"""`loconet train simulate` as a user runs it (issue 13 item 5): --device, per-step progress with
an ETA, checkpoint and resume (the resumed run ends on the uninterrupted run's model hash),
readable plots, and one-line errors instead of tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--workers",
    "2",
    "--inner-steps",
    "2",
    "--model-size",
    "tiny",
    "--batch-size",
    "2",
    "--compression",
    "topk:0.05+int8",
]


def train(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", "train", "simulate", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


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
    other = train(
        *[x if x != "topk:0.05+int8" else "topk:0.1+int8" for x in TINY],
        "--rounds",
        "3",
        "--checkpoint",
        str(ck),
        "--resume",
    )
    assert (
        other.returncode == 2 and "compression" in other.stderr and "Traceback" not in other.stderr
    )
    done = train(*TINY, "--rounds", "3", "--checkpoint", str(ck), "--resume")
    assert done.returncode == 2 and "already at round 3" in done.stderr


@pytest.mark.slow
def test_plots_and_outputs(tmp_path):
    r = train(*TINY, "--rounds", "2", "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    for f in (
        "log.json",
        "val_loss.png",
        "bytes_per_round.png",
        "checkpoint.safetensors",
        "segment/segment.json",
    ):
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
    r = train(
        *TINY, "--rounds", "3", "--checkpoint", str(tmp_path / "none.safetensors"), "--resume"
    )
    assert r.returncode == 2 and "no checkpoint" in r.stderr


@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="intended: checks the refusal on a machine WITHOUT a GPU (CI's); where CUDA exists, "
    "--device cuda is valid and the GPU path is exercised by benchmarks/gpu_table.sh instead",
)
def test_cuda_refused_where_there_is_none():
    r = train(*TINY, "--rounds", "1", "--device", "cuda")
    assert r.returncode == 2 and "no CUDA device" in r.stderr


def test_plot_axes_are_readable(tmp_path):
    """Rounds on the x axis are integers from 1 (0 = the initial model on the loss plot); the
    byte axis is logarithmic with labelled 1-2-5 ticks in B/kB/MB."""
    import matplotlib

    matplotlib.use("Agg")
    from trainer.cli import plot_run

    rounds = [
        {
            "round": i,
            "val_loss": 5 - i * 0.1,
            "train_loss": 5.1 - i * 0.1,
            "tokens": 100 * (i + 1),
            "bytes_per_worker": 900 * (i + 1) ** 3,
        }
        for i in range(6)
    ]
    log = {
        "config": {
            "workers": 2,
            "inner_steps": 4,
            "compression": "topk:0.01+int4",
            "overlap": False,
            "batch_size": 2,
            "seed": 0,
        },
        "n_params": 10_000,
        "tokens": 600,
        "val_curve": [{"tokens": 0, "val_loss": 5.5}],
        "rounds": rounds,
    }
    captured = {}
    import matplotlib.figure

    real = matplotlib.figure.Figure.savefig

    def spy(self, fname, *a, **kw):
        ax = self.axes[0]
        self.canvas.draw()
        captured[Path(fname).name] = (
            ax.get_xticks(),
            [t.get_text() for t in ax.get_yticklabels()],
            ax.get_yscale(),
            ax.get_title(),
        )
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


def test_overlap_plot_shows_the_final_model(tmp_path):
    """With --overlap the last round's update lands after the run, so the console's "final val
    loss" (and final model) is not the last round's point: the loss plot shows it as its own
    point, with its value in the legend, and says why round 1 stays at the initial loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.figure

    from trainer.cli import plot_run

    rounds = [
        {"round": i, "val_loss": 5 - i * 0.1, "train_loss": 4.0, "tokens": 1, "bytes_per_worker": 9}
        for i in range(3)
    ]
    log = {
        "config": {
            "workers": 2,
            "inner_steps": 4,
            "compression": "dense",
            "overlap": True,
            "batch_size": 2,
            "seed": 0,
        },
        "tokens": 3,
        "val_curve": [{"tokens": 0, "val_loss": 5.5}],
        "rounds": rounds,
        "final_val_loss": 4.321,
    }
    seen = {}
    real = matplotlib.figure.Figure.savefig

    def spy(self, fname, *a, **kw):
        ax = self.axes[0]
        seen[Path(fname).name] = (
            [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else [],
            [list(line.get_ydata()) for line in ax.get_lines()],
        )
        return real(self, fname, *a, **kw)

    matplotlib.figure.Figure.savefig = spy
    try:
        plot_run(log, tmp_path)
    finally:
        matplotlib.figure.Figure.savefig = real
    labels, ys = seen["val_loss.png"]
    assert any("final model" in t and "4.321" in t for t in labels), labels
    assert any("lands a round later" in t for t in labels) and [4.321] in ys
    log["config"]["overlap"], log["final_val_loss"] = False, rounds[-1]["val_loss"]
    # without overlap the final model is the last round's: no extra point, no note
    matplotlib.figure.Figure.savefig = spy
    try:
        plot_run(log, tmp_path)
    finally:
        matplotlib.figure.Figure.savefig = real
    labels, ys = seen["val_loss.png"]
    assert len(ys) == 2 and not any("final model" in t or "later" in t for t in labels)


def test_json_errors_are_json(tmp_path):
    r = train("--data", str(tmp_path / "missing.txt"), *TINY, "--rounds", "1", "-o", "json")
    assert r.returncode == 2 and "--data" in json.loads(r.stdout)["error"]


@pytest.mark.parametrize(
    "flags,says",
    [
        (("--inner-lr", "nan"), "--inner-lr must be a positive number"),
        (("--inner-lr", "-1"), "--inner-lr must be a positive number"),
        (("--outer-lr", "inf"), "--outer-lr must be a positive number"),
        (("--outer-momentum", "1.5"), "--outer-momentum must be in [0, 1)"),
    ],
)
def test_invalid_rates_are_one_line_errors(tmp_path, flags, says):
    """--inner-lr nan reached torch's AdamW: a ValueError traceback (red-team regression)."""
    r = train(*TINY, "--rounds", "1", *flags)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_invalid_out_that_is_a_file_is_refused_before_training(tmp_path):
    """--out FILE trained the whole run, then failed writing its log ("File exists")."""
    (tmp_path / "f").write_text("x")
    r = train(*TINY, "--rounds", "1", "--out", str(tmp_path / "f"))
    assert r.returncode == 2 and "is a file" in r.stderr and "step" not in r.stderr, r.stderr


@pytest.mark.parametrize(
    "body,says",
    [
        ("[" * 100_000, "cannot read segment"),  # RecursionError traceback
        ("[]", "is not a segment description"),  # TypeError traceback
        ('{"shard_spec": {"x": 1}, "k": 1}', "is not a segment description"),
        ('{"k": 1}', "is not a segment description"),  # KeyError traceback
    ],
)
def test_invalid_segment_json_is_one_line(tmp_path, body, says):
    seg = tmp_path / "seg"
    seg.mkdir()
    (seg / "segment.json").write_text(body)
    (seg / "start.state").write_bytes(b"x")
    (seg / "end.state").write_bytes(b"x")
    r = subprocess.run(
        [sys.executable, "-m", "node.cli", "train", "verify", "--segment", str(seg)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_invalid_half_written_segment_never_carries_its_name(tmp_path):
    """`train simulate` wrote log.json and the segment files in place: a run killed mid-write
    left half a segment.json under the name `train verify` reads. A real SIGKILL of a writer
    frozen after writing the bytes, before naming the file."""
    import signal

    code = (
        "import os, sys, time; from pathlib import Path; import trainer.cli as c\n"
        "def frozen(fd):\n    print('writing', flush=True); time.sleep(600)\n"
        "os.fsync = frozen\n"
        "c.write_atomic(Path(sys.argv[1]), b'{\"k\": 1, ' * 1000)\n"
    )
    target = tmp_path / "segment.json"
    p = subprocess.Popen(
        [sys.executable, "-c", code, str(target)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "writing"
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    p.stdout.close()
    assert not target.exists()  # only the killed writer's hidden temp file is left
    from trainer.cli import write_atomic

    write_atomic(target, b"{}")
    assert target.read_bytes() == b"{}"
    assert [x.name for x in tmp_path.glob("*.json")] == [target.name]


def test_checkpoint_save_leaves_no_temp_file_and_replaces_whole(tmp_path: Path) -> None:
    """write_safetensors (save_simulation's writer) uses a temp name of its own in the folder,
    fsyncs it and renames it; a failed write leaves the old file and no temp behind."""
    import pytest
    import torch
    from safetensors.torch import load_file

    from trainer import checkpoint

    path = tmp_path / "ck" / "checkpoint.safetensors"
    for step in (1, 2):
        checkpoint.write_safetensors(path, {"w": torch.full((3,), float(step))}, {"s": str(step)})
        assert sorted(p.name for p in path.parent.iterdir()) == ["checkpoint.safetensors"]
    assert float(load_file(str(path))["w"][0]) == 2.0
    with pytest.raises(Exception):  # noqa: B017 (safetensors' own error type for a bad tensor)
        checkpoint.write_safetensors(path, {"w": "not a tensor"}, {})  # type: ignore[dict-item]
    assert sorted(p.name for p in path.parent.iterdir()) == ["checkpoint.safetensors"]
    assert float(load_file(str(path))["w"][0]) == 2.0
