"""The market CLI is built from one table (node/cli_market.COMMANDS): every command parses, has
an example, and the builders it uses are the library's (node/market_msgs)."""

import hashlib

import pytest

from node.cli import market as cli_market
from node.cli.main import build_parser
from node.client import market_msgs


def test_every_table_command_parses_and_shows_an_example(capsys):
    parser = build_parser()
    assert len(cli_market.COMMANDS) == 19  # tx round decline included
    for c in cli_market.COMMANDS:
        argv = c.group.split() + [c.name, "--help"]
        with pytest.raises(SystemExit) as e:
            parser.parse_args(argv)
        assert e.value.code == 0
        text = capsys.readouterr().out
        assert "example:" in text and c.example.split()[1] in text


def test_submit_update_flags_reach_the_command():
    a = build_parser().parse_args(
        [
            "tx",
            "round",
            "submit-update",
            "1",
            "0",
            "--from",
            "alice",
            "--home",
            "h",
            "--base-model",
            "00" * 32,
            "--payload-file",
            "p",
            "--trace-file",
            "t",
            "--tokens",
            "8",
            "--loss-before",
            "1",
            "--loss-after",
            "1",
            "--blob",
            "http://x",
        ]
    )
    assert a.func is cli_market.cmd_round_submit and (a.job_id, a.round, a.fee) == (1, 0, None)
    q = build_parser().parse_args(["query", "rounds", "1", "--prove"])
    assert q.func is cli_market.cmd_query_rounds and q.prove and q.start == 0 and q.limit == 100


def test_bound_submit_binds_both_roots_to_the_signer():
    from abci_app.merkle import (
        BINDING_INDEX,
        binding_leaf,
        n_trace_leaves,
        n_update_leaves,
        verify_merkle_proof,
    )

    me, base = bytes(range(20)), bytes([3]) * 32
    trace = [bytes([i]) * 32 for i in range(5)]
    m = market_msgs.build_bound_submit(
        4,
        2,
        provider=me,
        base_model=base,
        payload=b"p" * 100,
        trace=trace,
        tokens=8,
        loss_before=1,
        loss_after=1,
        blob="http://x",
    ).submit_update
    assert verify_merkle_proof(
        m.update_root,
        binding_leaf(b"update", me, 4, 2, base),
        BINDING_INDEX,
        n_update_leaves(100),
        list(m.update_binding_proof),
    )
    assert verify_merkle_proof(
        m.trace_root,
        binding_leaf(b"trace", me, 4, 2, base),
        BINDING_INDEX,
        n_trace_leaves(5),
        list(m.trace_binding_proof),
    )
    r = market_msgs.build_reveal_from_trace(
        4, 2, 1, trace, "http://s", "http://e", provider=me, base_model=base
    ).reveal_segment
    from abci_app.jobs.incentives import mask_trace
    from abci_app.merkle import hash_leaf

    # the end is opened by its leaf hash only (both modes); the list masks every entry but 0,
    # H/k and the run's start (a later panel's fresh segment has an end nobody saw)
    assert r.start_state_hash == trace[1] and not r.end_state_hash
    assert r.end_leaf_hash == hash_leaf(trace[2])
    masked = b"".join(mask_trace(trace, {2, 3}))
    assert r.trace_list == masked  # the chain proves it against the trace root
    assert r.trace_list_hash == hashlib.sha256(masked).digest()
    with pytest.raises(market_msgs.UsageError):
        market_msgs.build_reveal_from_trace(
            4, 2, 4, trace, "http://s", "http://e", provider=me, base_model=base
        )


def test_reveal_opens_the_end_by_its_leaf_hash_and_masks_the_list():
    """`tx round reveal` (both modes): the end state hash and location stay secret; the message
    opens the end's leaf hash and the list holds the secret ends (of every challenged segment)
    as leaf hashes; --end-location and --exact are accepted and ignored."""
    from abci_app.jobs.incentives import mask_trace
    from abci_app.merkle import hash_leaf

    me, base = bytes(range(20)), bytes([3]) * 32
    trace = [bytes([i]) * 32 for i in range(5)]
    r = market_msgs.build_reveal_from_trace(
        4, 2, 1, trace, "http://s", "http://e", provider=me, base_model=base, segments=[1, 3]
    ).reveal_segment
    assert not r.end_state_hash and not r.end_location and r.end_leaf_hash == hash_leaf(trace[2])
    assert r.trace_list == b"".join(mask_trace(trace, {2})) and trace[2] not in r.trace_list


def test_tolerance_mode_cli_builds_probes(tmp_path):
    """Tolerance mode by hand: submit-update --probe-file binds the probe root to the signer,
    open-end opens an end with its probe proven under it, verdict --probes commits a blind vote
    and reveal-vote --probes opens it; bad probe files are refused with the fix."""
    import json

    from abci_app.jobs.incentives import compute_blind_vote_hash
    from abci_app.jobs.probe import PROBE_DIM, compute_probe_evidence, encode_probe
    from abci_app.merkle import BINDING_INDEX, binding_leaf, entry_leaf, n_trace_leaves
    from abci_app.merkle import verify_merkle_proof as vmp

    me, base = bytes(range(20)), bytes([3]) * 32
    trace = [bytes([i]) * 32 for i in range(5)]
    probes = [[0] * PROBE_DIM] + [[i * 1000 + j for j in range(PROBE_DIM)] for i in range(1, 5)]
    pf = tmp_path / "probes.json"
    pf.write_text(json.dumps(probes))
    assert cli_market.read_probes(str(pf)) == probes
    fields = market_msgs.probe_fields(4, 2, me, base, probes)
    leaf0 = binding_leaf(b"probe", me, 4, 2, base)
    n = n_trace_leaves(5)
    assert vmp(fields["probe_root"], leaf0, BINDING_INDEX, n, fields["probe_binding_proof"])
    oe = market_msgs.build_open_end(
        4, 2, 1, trace, probes, "http://e", provider=me, base_model=base
    ).open_end
    assert oe.end_state_hash == trace[2] and list(oe.probe) == probes[2]
    assert vmp(fields["probe_root"], encode_probe(probes[2]), entry_leaf(2), n, oe.probe_proof)
    bad = tmp_path / "bad.json"
    for text in ("{}", "[[1, 2]]", "[" + json.dumps([1 << 62] * PROBE_DIM) + "]"):
        bad.write_text(text)
        with pytest.raises(market_msgs.UsageError):
            cli_market.read_probes(str(bad))

    class Key:
        address = bytes([9]) * 20

        def sign(self, b):
            return hashlib.sha256(b).digest() * 2

    flat = [x for p in probes[1:3] for x in p]
    v = market_msgs.build_verdict(
        Key(), 4, 2, me, True, 8000, compute_probe_evidence(flat), blind=True
    )
    salt = market_msgs.vote_salt(Key(), 4, 2, me)
    ev = compute_probe_evidence(flat)
    assert v.verdict.vote_hash == compute_blind_vote_hash(4, 2, me, Key.address, ev, salt)
    o = market_msgs.build_reveal_vote(Key(), 4, 2, me, True, 8000, [], probes=flat).reveal_vote
    assert list(o.probes) == flat and o.evidence == ev and o.salt == salt and o.valid
    a = build_parser().parse_args(
        ["tx", "round", "verdict", "1", "0", "loco1x", "--valid", "--from", "bob", "--home", "h"]
    )
    with pytest.raises(market_msgs.UsageError, match="--probes"):
        cli_market._vote_args(a)


def test_verdict_unavailable_and_panel_flags():
    """tx round verdict/reveal-vote --unavailable (docs/threat-model.md *Unavailable votes*) is a
    vote of its own: combined with --valid/--invalid/--quality/--evidence/--probes it is refused
    naming the fix; --panel (first/appeal/final) picks the salt both commands derive."""
    base = ["tx", "round", "verdict", "1", "0", "loco1x", "--from", "bob", "--home", "h"]
    a = build_parser().parse_args(base + ["--unavailable", "--panel", "final"])
    assert a.unavailable and cli_market.PANELS[a.panel] == 2
    assert build_parser().parse_args(base + ["--valid"]).panel == "first"
    for extra in (["--valid"], ["--invalid"], ["--quality", "5"], ["--evidence", "00" * 32]):
        bad = build_parser().parse_args(base + ["--unavailable", *extra])
        with pytest.raises(market_msgs.UsageError, match="--unavailable is a vote of its own"):
            cli_market._vote_args(bad)
    with pytest.raises(SystemExit):
        build_parser().parse_args(base + ["--unavailable", "--panel", "second"])
