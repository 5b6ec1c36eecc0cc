"""benchmarks/gpu_table.sh: its dry run (tiny sizes, CPU) runs every line of the GPU script, so a
script that would not finish fails here first; a failing step is reported without aborting the
table; without a GPU the real run stops with one sentence naming the fix."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_table.sh"


def _run(args: list[str], env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_dry_run_finishes_and_a_failing_step_does_not_abort_the_table(tmp_path):
    # a python that runs every command for real, then reports the test step as failed: the
    # pytest line must still have collected the tests, and the table must still be made
    fake = tmp_path / "py"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'"{sys.executable}" "$@"; rc=$?\n'
        'if [ "${1:-}" = "-m" ] && [ "${2:-}" = "pytest" ]; then exit 1; fi\n'
        "exit $rc\n"
    )
    fake.chmod(0o755)
    out = tmp_path / "out"
    # DATA names no file: the lines must also run on a clean clone without the shared corpus
    p = _run(["--dry-run", str(out)], {"PY": str(fake), "DATA": str(tmp_path / "none.txt")})
    log = p.stdout + p.stderr
    assert p.returncode == 1, log
    assert "collected" in log  # the pytest line itself works
    assert "FAILED: tests on cpu (exit 1)" in log
    assert "the table goes on" in log
    assert "time estimate on cpu" in log  # printed before the table starts
    assert "rep 1 H=0" in (out / "batched_speed.txt").read_text()
    table = (out / "RESULTS_gpu.md").read_text()
    assert "| b | DiLoCo H=5, outer lr 0.7, momentum 0.9 |" in table
    assert "+ int4" in table and "all-gather" in table


def test_invalid_gpu_run_without_a_gpu_names_the_fix(tmp_path):
    # no device visible to the script, on any machine (a GPU machine included)
    p = _run([str(tmp_path / "out")], {"CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert p.returncode == 2
    assert "no CUDA device" in p.stderr and "--dry-run" in p.stderr
    assert "Traceback" not in p.stderr
