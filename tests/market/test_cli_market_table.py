"""The market CLI is built from one table (node/cli_market.COMMANDS): every command parses, has
an example, and the builders it uses are the library's (node/market_msgs)."""

import pytest

from node import cli_market, market_msgs
from node.cli import build_parser


def test_every_table_command_parses_and_shows_an_example(capsys):
    parser = build_parser()
    assert len(cli_market.COMMANDS) == 17
    for c in cli_market.COMMANDS:
        argv = c.group.split() + [c.name, "--help"]
        with pytest.raises(SystemExit) as e:
            parser.parse_args(argv)
        assert e.value.code == 0
        text = capsys.readouterr().out
        assert "example:" in text and c.example.split()[1] in text


def test_submit_update_flags_reach_the_command():
    a = build_parser().parse_args(["tx", "round", "submit-update", "1", "0", "--from", "alice", "--home", "h",
                                   "--base-model", "00" * 32, "--payload-file", "p", "--trace-file", "t",
                                   "--tokens", "8", "--loss-before", "1", "--loss-after", "1", "--blob", "http://x"])
    assert a.func is cli_market.cmd_round_submit and (a.job_id, a.round, a.fee) == (1, 0, 100)
    q = build_parser().parse_args(["query", "rounds", "1", "--prove"])
    assert q.func is cli_market.cmd_query_rounds and q.prove and q.start == 0 and q.limit == 100


def test_bound_submit_binds_both_roots_to_the_signer():
    from abci_app.merkle import BINDING_INDEX, binding_leaf, n_trace_leaves, n_update_leaves, verify_merkle_proof

    me, base = bytes(range(20)), bytes([3]) * 32
    trace = [bytes([i]) * 32 for i in range(5)]
    m = market_msgs.build_bound_submit(4, 2, provider=me, base_model=base, payload=b"p" * 100, trace=trace,
                                       tokens=8, loss_before=1, loss_after=1, blob="http://x").submit_update
    assert verify_merkle_proof(m.update_root, binding_leaf(b"update", me, 4, 2, base), BINDING_INDEX,
                               n_update_leaves(100), list(m.update_binding_proof))
    assert verify_merkle_proof(m.trace_root, binding_leaf(b"trace", me, 4, 2, base), BINDING_INDEX,
                               n_trace_leaves(5), list(m.trace_binding_proof))
    r = market_msgs.build_reveal_from_trace(4, 2, 1, trace, "http://s", "http://e", provider=me,
                                            base_model=base).reveal_segment
    assert (r.start_state_hash, r.end_state_hash) == (trace[1], trace[2])
    with pytest.raises(market_msgs.UsageError):
        market_msgs.build_reveal_from_trace(4, 2, 4, trace, "http://s", "http://e", provider=me, base_model=base)
