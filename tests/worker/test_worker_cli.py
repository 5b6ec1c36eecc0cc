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
