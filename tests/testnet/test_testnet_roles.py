"""`testnet up --cheaters` and `--fixed-roles` without a network: the mixed cheater form, the role
split, and that a verify-only provider's registration is one the chain's draw of participants
skips for the built-in job while a trainer's is taken (abci_app.jobs.incentives)."""

from __future__ import annotations

from pathlib import Path

import pytest

from abci_app.jobs.incentives import is_job_acceptable
from abci_app.pb import jobs_pb2, providers_pb2
from node.client.market_msgs import build_register_provider
from node.local import testnet_market as tm
from tests.kits.clikit import run as run_cli


def test_cheaters_take_several_kinds_in_one_item_or_many() -> None:
    mixed = tm.parse_cheaters(["poison:1,withhold:1,lazy-verifier:1"], 6)
    assert mixed == ["honest"] * 3 + ["poison", "withhold", "lazy-verifier"]
    assert tm.parse_cheaters(["poison:1", "withhold:2"], 4) == [
        "honest",
        "poison",
        "withhold",
        "withhold",
    ]
    assert tm.parse_cheaters(["random-root"], 2) == ["honest", "random-root"]  # COUNT defaults to 1
    assert tm.parse_cheaters([" poison:1 , withhold:1 "], 2) == ["poison", "withhold"]


@pytest.mark.parametrize(
    ("items", "providers", "says"),
    [
        (["poison:1,sloth:1"], 4, "'sloth:1'"),
        (["poison:x"], 4, "KIND:COUNT[,KIND:COUNT...]"),
        (["poison:1,"], 4, "bad --cheaters ''"),
        (["poison:2,withhold:2"], 3, "4 cheaters but --providers is 3"),
        # a huge count is refused before building the list (it raised MemoryError)
        (["poison:99999999999999"], 4, "99999999999999 cheaters but --providers is 4"),
        (["poison:1", "withhold:" + "9" * 40], 4, "more than 10^19 cheaters"),
        # digits of other scripts are not a count
        (["poison:\uff11"], 4, "KIND:COUNT[,KIND:COUNT...]"),
    ],
)
def test_bad_cheaters_name_the_form(items: list[str], providers: int, says: str) -> None:
    with pytest.raises(tm.TestnetMarketError) as e:
        tm.parse_cheaters(items, providers)
    assert says in str(e.value)


def test_drawn_roles_only_pin_the_lazy_verifier() -> None:
    b = tm.parse_cheaters(["random-root:1,lazy-verifier:1"], 4)
    assert tm.plan_roles(b, fixed=False) == ["any", "any", "any", "verify"]


def test_fixed_roles_fill_the_verifier_seats_lazy_first_then_the_last_honest() -> None:
    b = tm.parse_cheaters(["poison:1,withhold:1,lazy-verifier:1"], 6)
    roles = tm.plan_roles(b, fixed=True)
    assert roles == ["train", "verify", "verify", "train", "train", "verify"]
    assert roles.count("verify") == tm.verifier_seats(6) == 3
    b = tm.parse_cheaters(["random-root:1"], 4)  # 2 seats: the last two honest verify
    assert tm.plan_roles(b, fixed=True) == ["train", "verify", "verify", "train"]


@pytest.mark.parametrize(
    ("cheaters", "providers", "says"),
    [
        ("lazy-verifier:3", 4, "2 verifier seats"),
        ("poison:1,withhold:1,lazy-verifier:1", 4, "needs 2 honest providers"),
    ],
)
def test_fixed_roles_refuse_a_split_without_honest_work(
    cheaters: str, providers: int, says: str
) -> None:
    with pytest.raises(tm.TestnetMarketError) as e:
        tm.plan_roles(tm.parse_cheaters([cheaters], providers), fixed=True)
    assert says in str(e.value)


def test_up_refuses_a_bad_split_before_creating_anything(tmp_path: Path) -> None:
    d = tmp_path / "net"
    r = run_cli(
        "testnet", "up", "--dir", str(d), "--providers", "4", "--fixed-roles",
        "--cheaters", "poison:1,withhold:1,lazy-verifier:1",
    )  # fmt: skip
    assert r.returncode != 0 and "needs 2 honest providers" in r.stdout + r.stderr
    assert not d.exists()


def test_a_verify_only_provider_is_never_drawn_to_train_the_builtin_job() -> None:
    b = tm.BUILTIN_JOB
    job = jobs_pb2.Job(
        owner=b"o" * 20,
        spec=jobs_pb2.JobSpec(
            model=jobs_pb2.ModelConfig(**b["model"]),
            participants_per_round=6 - tm.verifier_seats(6),
        ),
        reward_per_round=b["reward_per_round"],
    )
    for role in ("train", "verify"):
        msg = build_register_provider(
            tm.PROVIDER_BOND,
            ["cpu:1:1024"],
            1,
            "local",
            "http://127.0.0.1:1",
            min_slot_reward=tm.VERIFY_ONLY_SLOT if role == "verify" else 0,
        ).register_provider
        p = providers_pb2.Provider(
            address=b"p" * 20, bond=msg.bond, reputation=5000, policy=msg.policy
        )
        assert is_job_acceptable(p, job, 1) == (role == "train"), role


def test_invalid_cheaters_on_an_existing_network_are_refused(tmp_path: Path) -> None:
    """`testnet up --cheaters` on a folder that already holds a network restarts it: the workers'
    behaviours were fixed at its creation, so the flags would be silently ignored (an honest
    network where the user asked for cheaters). Refused, naming --purge, in -o json too."""
    import json

    from node.local.manifest import manifest_path

    d = tmp_path / "net"
    manifest_path(d).parent.mkdir(parents=True)
    manifest_path(d).write_text("{}")
    for flags in (["--cheaters", "poison:1"], ["--fixed-roles"]):
        r = run_cli("testnet", "up", "--dir", str(d), "--providers", "4", *flags, "-o", "json")
        assert r.returncode != 0
        err = json.loads(r.stdout)["error"]
        assert "already holds a network" in err and "--purge" in err
    assert manifest_path(d).read_text() == "{}"
