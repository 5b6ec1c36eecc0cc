"""`tx provider register` on a machine with no GPU said nothing, and any --throughput claim was
accepted unchecked (#28 item 11). It now warns, one stderr line per warning and a "warnings"
field under -o json, when torch sees no CUDA device or the claim is above a quick estimate for
this machine; the tx is still sent (a warning, not a refusal). torch is imported only there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from node.cli import main as cli
from node.cli import market as cli_market
from node.client.keys import Keyring
from tests.kits.clikit import ROOT

FLOPS = 1e10  # what the fake matmul timing reports: 10 GFLOP/s


@pytest.fixture
def sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """(msgs, extra) of every broadcast; torch's CUDA answer and the timing are faked."""
    import torch

    got: list[Any] = []

    def fake_broadcast(a: Any, key: str, msgs: list[Any], extra: Any = None) -> int:
        got.append((msgs, extra))
        return 0

    monkeypatch.setattr(cli_market, "broadcast", fake_broadcast)
    monkeypatch.setattr(cli_market, "_matmul_flops", lambda torch, device: FLOPS)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return got


def register(home: Path, throughput: int, *more: str) -> list[str]:
    return [
        *("tx", "provider", "register", "--from", "alice", "--bond", "2000loco"),
        *("--throughput", str(throughput), "--region", "eu", "--endpoint", "http://x:1"),
        *("--home", str(home), *more),
    ]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    Keyring(tmp_path).add("alice")
    return tmp_path


def ceiling() -> int:
    return int(FLOPS * cli_market.THROUGHPUT_SLACK // cli_market.DEFAULT_MODEL_FLOPS_PER_TOKEN)


def test_register_without_gpu_warns_on_stderr_and_in_json(
    home: Path, sent: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(register(home, 100)) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: torch sees no CUDA GPU"), err
    assert sent[-1][1] is None  # text: the warning is on stderr only
    assert cli.main(register(home, 100, "-o", "json")) == 0
    extra = sent[-1][1]
    assert extra is not None and len(extra["warnings"]) == 1
    assert "no CUDA GPU" in extra["warnings"][0]
    assert len(sent[-1][0]) == 1  # still registered: a warning, not a refusal


def test_register_throughput_above_the_estimate_warns(
    home: Path, sent: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    top = ceiling()
    assert cli.main(register(home, top + 1, "-o", "json")) == 0
    warnings = sent[-1][1]["warnings"]
    assert len(warnings) == 2 and f"--throughput {top + 1} tokens/s is above" in warnings[1]
    assert f"at most ~{top} tokens/s" in warnings[1]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(x.startswith("warning: ") for x in err)
    assert cli.main(register(home, top, "-o", "json")) == 0  # at the ceiling: only the GPU
    assert len(sent[-1][1]["warnings"]) == 1


def test_register_with_a_gpu_and_a_plausible_claim_is_silent(
    home: Path, sent: list[Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from node.worker import ml

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(ml, "detect_hardware", lambda: ["H100:2:81920"])
    argv = register(home, 2 * ceiling(), "--gpu", "H100:2:81920", "-o", "json")
    assert cli.main(argv) == 0  # two GPUs: twice the ceiling
    assert sent[-1][1]["warnings"] == [] and capsys.readouterr().err == ""
    assert cli.main([*argv[:-2], "--throughput", str(2 * ceiling() + 10), "-o", "json"]) == 0
    assert "is above" in sent[-1][1]["warnings"][0]


def test_register_for_other_hardware_is_not_measured_here(
    home: Path, sent: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_timing(*a: Any) -> float:
        raise AssertionError("another machine's hardware cannot be timed here")

    monkeypatch.setattr(cli_market, "_matmul_flops", no_timing)
    assert cli.main(register(home, 10**12, "--gpu", "H100:8:81920", "-o", "json")) == 0
    (only,) = sent[-1][1]["warnings"]
    assert only.startswith("torch sees no CUDA GPU")


def test_register_skip_hardware_check_is_silent(
    home: Path, sent: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(register(home, 10**12, "--skip-hardware-check", "-o", "json")) == 0
    assert sent[-1][1] == {"warnings": []} and capsys.readouterr().err == ""


def test_the_cli_imports_torch_only_for_register() -> None:
    code = (
        "import sys; from node.cli.main import build_parser; build_parser(); "
        "print('torch' in sys.modules)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.stdout.strip() == "False", r.stderr
