"""EVM settlement costs: gas per checkpoint (4, 21, 100 validators; the fewest signers that pass
2/3 and all of them; with and without a set rotation), gas per claim, with --tree N the chain's
claim query on an N-address rewards tree (the stored incremental tree against a rebuild of the
whole tree), and, with --latency, the relayer's latency from the loconet block that makes a
checkpoint final to the EVM receipt on anvil (a real 4-validator `loconet testnet up --evm`).

    .venv/bin/python benchmarks/evm_gas.py [--tree 100000] [--latency] [-o json]

Gas is measured in process (web3 + eth-tester on py-evm, Cancun rules: the same figures anvil
or mainnet charge for these calls). Targets (issue 14): checkpoint with 100 validators < 1.5 M
gas; claim < 90 k gas."""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from web3 import Web3

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.kits is not installed: the checkout's root

from abci_app.settlement import evm, keeper  # noqa: E402
from abci_app.store import CacheKV, MerkleStore  # noqa: E402
from node.evm import client  # noqa: E402
from node.local.manifest import load, nodes_of  # noqa: E402
from tests.kits.evmkit import EVM, checkpoint, make_set  # noqa: E402


def checkpoint_gas(n: int) -> dict[str, int]:
    s = make_set(n, tag=f"g{n}-")
    quorum = (2 * n) // 3 + 1
    rot = make_set(n, tag=f"r{n}-")
    c = EVM(s)
    # warm-up: the contract's first write of each slot costs 20,000 more, once
    c.submit(checkpoint(1, s))
    r_min = c.submit(checkpoint(2, s, signed_by=s[:quorum]))
    r_all = c.submit(checkpoint(3, s))
    r_rot = c.submit(checkpoint(4, s, next_set=rot, signed_by=s[:quorum]))
    return {
        "validators": n,
        "signers_min": quorum,
        "gas_min": r_min["gasUsed"],
        "gas_all": r_all["gasUsed"],
        "gas_rotation": r_rot["gasUsed"],
    }


def claim_gas(leaves: int) -> dict[str, int]:
    s = make_set(4, tag="c")
    c = EVM(s)
    accts = sorted(evm.keccak256(b"claimant%d" % i)[:20] for i in range(leaves))
    entries = [(a, 1_000_000 + i) for i, a in enumerate(accts)]
    c.submit(checkpoint(1, s, root=evm.rewards_root(entries)))
    first = c.claim(*entries[0], evm.claim_proof(entries, 0))["gasUsed"]  # creates totalSupply too
    new_acct = c.claim(*entries[1], evm.claim_proof(entries, 1))["gasUsed"]
    entries2 = [(a, v + 7) for a, v in entries]
    c.submit(checkpoint(2, s, root=evm.rewards_root(entries2)))
    again = c.claim(*entries2[1], evm.claim_proof(entries2, 1))["gasUsed"]
    return {
        "tree_leaves": len(entries),
        "proof_len": len(evm.claim_proof(entries, 1)),
        "first_mint_of_token": first,
        "first_claim_of_account": new_acct,
        "later_claim_of_account": again,
    }


def tree_query(n: int) -> dict[str, object]:
    """The claim query on an n-address tree: O(log n) reads of the stored tree (keeper) against
    the rebuild of the whole tree it replaced (evm.claim_proof over every cumulative)."""
    store = CacheKV(MerkleStore(None))
    accts = [evm.keccak256(b"holder%d" % i)[:20] for i in range(n)]
    t0 = time.process_time()
    for i, a in enumerate(accts):
        keeper.set_cumulative(store, a, 1_000 + i)
    build = time.process_time() - t0
    probe = accts[n // 2]
    t0 = time.process_time()
    reps = 200
    for _ in range(reps):
        index = keeper.get_leaf_index(store, probe)
        assert index is not None
        proof = keeper.get_claim_proof(store, index)
        root = keeper.get_rewards_root(store)
    incremental = (time.process_time() - t0) / reps
    t0 = time.process_time()
    entries = keeper.iterate_leaves(store)
    full_proof = evm.claim_proof(entries, n // 2)
    full_root = evm.rewards_root(entries)
    rebuild = time.process_time() - t0
    assert full_proof == proof and full_root == root
    return {
        "addresses": n,
        "build_s_cpu": round(build, 2),
        "withdraw_tree_writes": len(proof) + 1,
        "query_ms_cpu_incremental": round(incremental * 1000, 3),
        "query_s_cpu_full_rebuild": round(rebuild, 2),
    }


def withdraw_to_claimable(d: Path, cli: list[str], runs: int = 3) -> dict[str, object]:
    """Seconds from a withdrawal's broadcast to the contract holding a root that pays it (the
    relayer posted a checkpoint of a height at or after the withdrawal's block)."""
    dep = client.Deployment.load(d / "evm" / "deployment.json")
    w3 = Web3(Web3.HTTPProvider("http://127.0.0.1:48545"))
    cps = client.checkpoints(w3, dep)
    node = nodes_of(load(d))[0].rpc_url
    out = []
    for _ in range(runs):
        t0 = time.monotonic()
        r = subprocess.run(
            [
                *cli,
                *("tx", "settlement", "withdraw", "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"),
                *("1loco", "--from", "validator0", "--home", str(d), "--node", node, "-o", "json"),
            ],
            check=True,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        h = int(json.loads(r.stdout)["height"])
        while int(cps.functions.lastHeight().call()) < h:
            if time.monotonic() - t0 > 300:
                raise TimeoutError("no checkpoint reached the withdrawal in 300 s")
            time.sleep(0.2)
        out.append(time.monotonic() - t0)
    out.sort()
    return {
        "withdraw_to_claimable_s": [round(x, 1) for x in out],
        "withdraw_to_claimable_s_median": round(out[len(out) // 2], 1),
    }


def latency(checkpoints: int = 6) -> dict[str, object]:
    d = Path(tempfile.mkdtemp(prefix="loconet-evm-bench-"))
    cli = [sys.executable, "-m", "node.cli"]
    subprocess.run(
        [
            *cli,
            "testnet",
            "up",
            "--dir",
            str(d),
            "--base-port",
            "46656",
            "--evm",
            "--evm-port",
            "48545",
            "--param",
            "settlement.checkpoint_interval=10",
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    try:
        claimable = withdraw_to_claimable(d, cli)
        log = d / "evm" / "relayer.log"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            got = re.findall(
                r"posted checkpoint (\d+) .*?, ([\d.]+)s after",
                log.read_text() if log.exists() else "",
            )
            if len(got) >= checkpoints:
                break
            time.sleep(1)
        secs = sorted(float(s) for _, s in got)
        return {
            **claimable,
            "checkpoints": len(secs),
            "latency_s_min": secs[0],
            "latency_s_median": secs[len(secs) // 2],
            "latency_s_max": secs[-1],
        }
    finally:
        subprocess.run(
            [*cli, "testnet", "down", "--dir", str(d), "--purge"],
            cwd=ROOT,
            capture_output=True,
            check=False,
        )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--latency",
        action="store_true",
        help="also measure relayer latency on a real testnet + anvil (~1 min)",
    )
    ap.add_argument("--tree", type=int, default=0, help="also time the claim query at N addresses")
    ap.add_argument(
        "--validators",
        default="4,21,100",
        help="checkpoint sizes to measure (default 4,21,100)",
    )
    ap.add_argument("-o", "--output", choices=["text", "json"], default="text")
    a = ap.parse_args()
    checkpoints = [checkpoint_gas(int(n)) for n in a.validators.split(",")]
    claims = [claim_gas(n) for n in (10, 1_000, 100_000)]
    res: dict[str, object] = {
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
        "checkpoints": checkpoints,
        "claims": claims,
    }
    if a.tree:
        res["tree"] = tree_query(a.tree)
    if a.latency:
        res["relayer"] = latency()
    if a.output == "json":
        print(json.dumps(res, indent=1, sort_keys=True))
        return 0
    print(
        "| validators | signers (min > 2/3) | gas, min signers | gas, all sign | gas, min "
        "signers + rotation |"
    )
    print("|---|---|---|---|---|")
    for r in checkpoints:
        print(
            f"| {r['validators']} | {r['signers_min']} | {r['gas_min']:,} | {r['gas_all']:,} | "
            f"{r['gas_rotation']:,} |"
        )
    print(
        "\n"
        "| claimants (tree leaves) | proof hashes | first claim of an account | later claim of "
        "it | the token's very first mint |"
    )
    print("|---|---|---|---|---|")
    for c in claims:
        print(
            f"| {c['tree_leaves']:,} | {c['proof_len']} | {c['first_claim_of_account']:,} | "
            f"{c['later_claim_of_account']:,} | {c['first_mint_of_token']:,} |"
        )
    if "tree" in res:
        print(f"\nclaim query on the chain: {res['tree']}")
    if "relayer" in res:
        print(f"\nrelayer latency (final loconet block -> EVM receipt): {res['relayer']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
