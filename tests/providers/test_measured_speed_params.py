"""The measured-speed params (providers README *Params*): a zero cap would shut every new
provider out of every job that states a speed, and a zero EMA window divides by zero; genesis
refuses both with a message naming the param."""

from __future__ import annotations

import pytest

from abci_app.providers.params import DEFAULTS, params_from_json, params_to_json


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("unmeasured_throughput_cap", 0),
        ("unmeasured_throughput_cap", 2**64),
        ("throughput_ema_window", 0),
        ("throughput_ema_window", 1_001),
    ],
)
def test_genesis_refuses_a_cap_or_window_out_of_range(key: str, value: int) -> None:
    with pytest.raises(ValueError, match=key):
        params_from_json({key: value})


def test_defaults_round_trip() -> None:
    p = params_from_json({})
    assert p.unmeasured_throughput_cap == DEFAULTS["unmeasured_throughput_cap"] == 1_000
    assert p.throughput_ema_window == DEFAULTS["throughput_ema_window"] == 4
    assert params_from_json(params_to_json(p)) == p
