"""`tx provider register` fills the hardware from torch; `provider run` refuses bad options
and a provider that is not registered, with one line naming the fix."""

import pytest

from node.cli import market as cli_market
from node.cli.main import build_parser, main
from node.worker import ml


def test_register_without_gpu_sends_what_torch_sees(monkeypatch):
    sent = []
    monkeypatch.setattr(
        cli_market, "broadcast", lambda a, key, msgs, *extra: sent.extend(msgs) or 0
    )
    a = build_parser().parse_args(
        [
            "tx",
            "provider",
            "register",
            "--from",
            "alice",
            "--home",
            "h",
            "--bond",
            "2000loco",
            "--throughput",
            "5",
            "--region",
            "eu",
            "--endpoint",
            "http://x:1",
        ]
    )
    assert a.func(a) == 0
    hw = sent[0].register_provider.hardware
    assert [f"{g.model}:{g.count}:{g.memory_mib}" for g in hw] == ml.detect_hardware()


def test_provider_run_refuses_bad_input(tmp_path, capsys):
    from node.client.keys import Keyring

    assert main(["provider", "run", "--home", str(tmp_path), "--from", "nobody"]) == 1
    assert "no key named 'nobody'" in capsys.readouterr().err
    Keyring(tmp_path).add("alice")
    assert (
        main(
            ["provider", "run", "--home", str(tmp_path), "--from", "alice", "--behaviour", "sneaky"]
        )
        == 1
    )
    assert "--behaviour must be one of" in capsys.readouterr().err
    # nothing listens on this node: the preflight names the node and the fix
    rc = main(
        [
            "provider",
            "run",
            "--home",
            str(tmp_path),
            "--from",
            "alice",
            "--node",
            "http://127.0.0.1:9",
            "--data-dir",
            str(tmp_path / "w"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "127.0.0.1:9" in err and "no --node answers" in err, err
    with pytest.raises(SystemExit):
        main(["provider", "run", "--help"])
    assert "FOR TESTS AND DEMOS ONLY" in capsys.readouterr().out


@pytest.mark.parametrize("addr", ["nonsense", "127.0.0.1:70000", "127.0.0.1:²", ":-1"])
def test_invalid_metrics_listen_is_a_usage_error(tmp_path, capsys, addr):
    from node.client.keys import Keyring

    Keyring(tmp_path).add("alice")
    rc = main(
        ["provider", "run", "--home", str(tmp_path), "--from", "alice", "--metrics-listen", addr]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "--metrics-listen" in err and "HOST:PORT" in err, err


def test_worker_metrics_count_training_and_rounds():
    """What a scrape of the worker's /metrics shows after one trained and submitted round."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from node.metrics import worker_metrics
    from node.ports import find_free_base, random_bases
    from node.worker.train import record_training

    m = worker_metrics()  # the process-wide registry the worker records into
    port = find_free_base(random_bases(30_000, 40_000, 1), [0])
    server, _ = m.serve(f"127.0.0.1:{port}")

    def scrape() -> dict:
        body = (
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        )
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(body)
            for s in fam.samples
        }

    try:
        before = scrape()
        record_training(8, 2.0, 3.25, 1, 2)
        m.round_done(True)
        after = scrape()
    finally:
        server.shutdown()

    def grew(name: str, labels: tuple = ()) -> float:
        return after[(name, labels)] - before.get((name, labels), 0.0)

    assert after[("loconet_training_loss", (("job", "1"),))] == 3.25
    assert after[("loconet_training_round", (("job", "1"),))] == 2
    assert grew("loconet_training_steps_total") == 8
    assert grew("loconet_training_step_seconds_count") == 8
    assert abs(grew("loconet_training_step_seconds_sum") - 2.0) < 1e-9
    assert grew("loconet_rounds_done_total", (("result", "committed"),)) == 1


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["--procs", "0"], "--procs must be at least 1"),
        (["--device", "cpu", "--gpus", "-2"], "--procs must be at least 1"),
    ],
)
def test_provider_run_refuses_a_bad_island_size(tmp_path, capsys, argv, msg):
    from node.client.keys import Keyring

    Keyring(tmp_path).add("alice")
    rc = main(["provider", "run", "--home", str(tmp_path), "--from", "alice", *argv])
    err = capsys.readouterr().err
    assert rc == 1 and msg in err, err


def test_island_on_cuda_needs_that_many_gpus(tmp_path, monkeypatch):
    import torch

    from node.worker.context import WorkerError, check_procs

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(WorkerError, match="torch sees 1 GPU"):
        check_procs(2, "cuda")
    check_procs(2, "cpu")  # gloo processes on CPU: any N


@pytest.mark.parametrize("listen", ["0.0.0.0:99999", "0.0.0.0:0", "h:\u0668\u0660", "h:x", "h:"])
def test_invalid_listen_port_is_a_worker_error(listen):
    """--listen 0.0.0.0:99999 reached bind(): OverflowError out of the worker's start (red-team
    regression); a port is 1..65535 in ASCII digits."""
    from types import SimpleNamespace

    from node.worker.worker import ProviderWorker, WorkerError

    w = ProviderWorker.__new__(ProviderWorker)
    w.cfg = SimpleNamespace(listen=listen)
    with pytest.raises(WorkerError, match="--listen"):
        w._listen()
    w.cfg = SimpleNamespace(listen="127.0.0.1:26680")
    assert w._listen() == ("127.0.0.1", 26680)


_HOLD_WORKER = """
import sys, time
from pathlib import Path
from node.atomic import hold
hold(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("lock", ["data", "key"])
def test_invalid_second_worker_for_one_key_or_data_dir(tmp_path, capsys, lock):
    """Two `provider run` for one key (a restart while the old one still ran) both trained,
    raced on progress.json and sent every duty twice from one account; the second is refused,
    naming the first one's pid."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from node.client.keys import Keyring

    Keyring(tmp_path).add("alice")
    data = tmp_path / "worker" / "alice"
    data.mkdir(parents=True)
    path = data / "worker.lock" if lock == "data" else tmp_path / "keyring" / ".alice.worker.lock"
    root = Path(__file__).resolve().parents[2]
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLD_WORKER, str(path)], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        rc = main(["provider", "run", "--home", str(tmp_path), "--from", "alice"])
        err = capsys.readouterr().err
        assert rc == 1 and f"another provider worker (pid {p.pid})" in err, err
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(10)


def test_invalid_damaged_worker_store_is_one_line(tmp_path, capsys):
    from node.client.keys import Keyring

    Keyring(tmp_path).add("alice")
    blobs = tmp_path / "worker" / "alice" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "meta.db").write_text("garbage " * 20)
    rc = main(["provider", "run", "--home", str(tmp_path), "--from", "alice"])
    err = capsys.readouterr().err
    assert rc == 1 and "blob store" in err and "Traceback" not in err, err


def test_invalid_websocket_messages_are_ignored_not_fatal():
    """A node's websocket sending a JSON list, or JSON nested 100,000 deep, raised
    AttributeError / RecursionError out of the follower's handler: the subscription dropped
    and moved to the next node. They are ignored like any message the worker does not read."""
    import json

    from node.worker.follow import ChainFollower

    f = ChainFollower(["ws://127.0.0.1:9"])
    for text in ("[]", "[" * 100_000, '"x"', "null", '{"result": []}', "{"):
        f._handle(text)
    block = {"result": {"data": {"value": {"block": {"header": {"height": "7"}}}}}}
    f._handle(json.dumps(block))
    assert f.height == 7


@pytest.mark.parametrize("quota", ["\u0661", "1e3", "4294967296"])
def test_invalid_quota_gib_that_is_not_ascii_u32_is_a_usage_error(tmp_path, capsys, quota):
    """``--quota-gib \u0661`` (Arabic-Indic one) was read as 1 by Python's int()."""
    from node.client.keys import Keyring

    Keyring(tmp_path).add("alice")
    with pytest.raises(SystemExit) as e:
        main(["provider", "run", "--home", str(tmp_path), "--from", "alice", "--quota-gib", quota])
    assert e.value.code == 2 and "--quota-gib" in capsys.readouterr().err
