"""The worker's progress file: atomic, reloadable, and a corrupt file never stops a restart."""

import json
import os
import signal
import subprocess
import sys

from node.worker.progress import Progress


def test_progress_survives_a_reload(tmp_path):
    p = Progress(tmp_path / "progress.json")
    p.update(1, 0, payload="aa", trace=["bb", "cc"])
    p.update(1, 1, submitted="tx")
    q = Progress(tmp_path / "progress.json")
    assert (
        q.round(1, 0) == {"payload": "aa", "trace": ["bb", "cc"]}
        and q.round(1, 1)["submitted"] == "tx"
    )
    q.forget_before(1, 1)
    assert "1/0" not in Progress(tmp_path / "progress.json").data["rounds"]
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".progress-")]  # no temp file left


def test_corrupt_progress_is_set_aside(tmp_path):
    (tmp_path / "progress.json").write_text("{half")
    p = Progress(tmp_path / "progress.json")
    assert p.data["rounds"] == {} and (tmp_path / "progress.corrupt").exists()


def test_kill_9_while_writing_leaves_a_whole_file(tmp_path):
    """A writer killed at any moment: the file parses and holds one of the records written."""
    code = (
        "import sys; from pathlib import Path; from node.worker.progress import Progress\n"
        "p = Progress(Path(sys.argv[1]))\n"
        "i = 0\n"
        "while True:\n"
        "    p.update(1, 0, n=i, blob='x' * 50000); i += 1\n"
        "    if i == 3: print('go', flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "progress.json")], stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"go"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    d = json.loads((tmp_path / "progress.json").read_text())
    assert d["rounds"]["1/0"]["n"] >= 2 and len(d["rounds"]["1/0"]["blob"]) == 50000


def test_invalid_progress_of_another_shape_is_set_aside(tmp_path):
    """Valid JSON of another shape (a hand edit, another version) was loaded as it was: a round
    key like "x/1" made forget_before raise ValueError, an entry that is not an object made
    update raise AttributeError, in the worker's loop (red-team regression)."""
    for body in ('{"rounds": {"x/1": {}}}', '{"rounds": {"1/0": []}}', '{"rounds": {"5": {}}}'):
        (tmp_path / "progress.json").write_text(body)
        p = Progress(tmp_path / "progress.json")
        assert p.data["rounds"] == {}
        assert (tmp_path / "progress.corrupt").read_text() == body
        p.update(1, 0, payload="aa")
        p.forget_before(1, 1)
        assert Progress(tmp_path / "progress.json").data["rounds"] == {}
