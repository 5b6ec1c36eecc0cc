"""`tx provider register` fills the hardware from torch; `provider run` refuses bad options
and a provider that is not registered, with one line naming the fix."""

import pytest

from node import cli_market
from node.cli import build_parser, main
from node.worker import ml


def test_register_without_gpu_sends_what_torch_sees(monkeypatch):
    sent = []
    monkeypatch.setattr(cli_market, "broadcast", lambda a, key, msgs, *extra: sent.extend(msgs) or 0)
    a = build_parser().parse_args(["tx", "provider", "register", "--from", "alice", "--home", "h", "--bond", "2000loco",
                                   "--throughput", "5", "--region", "eu", "--endpoint", "http://x:1"])
    assert a.func(a) == 0
    hw = sent[0].register_provider.hardware
    assert [f"{g.model}:{g.count}:{g.memory_mib}" for g in hw] == ml.detect_hardware()


def test_provider_run_refuses_bad_input(tmp_path, capsys):
    from node.keys import Keyring

    assert main(["provider", "run", "--home", str(tmp_path), "--from", "nobody"]) == 1
    assert "no key named 'nobody'" in capsys.readouterr().err
    Keyring(tmp_path).add("alice")
    assert main(["provider", "run", "--home", str(tmp_path), "--from", "alice", "--behaviour", "sneaky"]) == 1
    assert "--behaviour must be one of" in capsys.readouterr().err
    # nothing listens on this node: the preflight names the node and the fix
    rc = main(["provider", "run", "--home", str(tmp_path), "--from", "alice", "--node", "http://127.0.0.1:9",
               "--data-dir", str(tmp_path / "w")])
    err = capsys.readouterr().err
    assert rc == 1 and "127.0.0.1:9" in err and "no --node answers" in err, err
    with pytest.raises(SystemExit):
        main(["provider", "run", "--help"])
    assert "FOR TESTS AND DEMOS ONLY" in capsys.readouterr().out


@pytest.mark.parametrize("addr", ["nonsense", "127.0.0.1:70000", "127.0.0.1:²", ":-1"])
def test_invalid_metrics_listen_is_a_usage_error(tmp_path, capsys, addr):
    from node.keys import Keyring

    Keyring(tmp_path).add("alice")
    rc = main(["provider", "run", "--home", str(tmp_path), "--from", "alice", "--metrics-listen", addr])
    err = capsys.readouterr().err
    assert rc == 1 and "--metrics-listen" in err and "HOST:PORT" in err, err


def test_worker_metrics_count_training_and_rounds():
    """What a scrape of the worker's /metrics shows after one trained and submitted round."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from node.metrics import worker_metrics
    from node.ports import find_free_base, random_bases
    from node.worker.worker import _record_training

    m = worker_metrics()  # the process-wide registry the worker records into
    port = find_free_base(random_bases(30_000, 40_000, 1), [0])
    server, _ = m.serve(f"127.0.0.1:{port}")

    def scrape() -> dict:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(body) for s in fam.samples}

    try:
        before = scrape()
        _record_training(8, 2.0, 3.25)
        m.round_done(True)
        after = scrape()
    finally:
        server.shutdown()

    def grew(name: str, labels: tuple = ()) -> float:
        return after[(name, labels)] - before.get((name, labels), 0.0)

    assert after[("loconet_training_loss", ())] == 3.25
    assert grew("loconet_training_steps_total") == 8
    assert grew("loconet_training_step_seconds_count") == 8
    assert abs(grew("loconet_training_step_seconds_sum") - 2.0) < 1e-9
    assert grew("loconet_rounds_done_total", (("result", "committed"),)) == 1
