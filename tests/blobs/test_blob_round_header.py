"""The blob server attributes bytes to the round a fetcher names in ``X-Loconet-Round``: a header
any client sets. Garbage, huge or look-alike values attribute nothing, and a client naming a new
round on every request cannot grow the server's per-round counters without bound."""

from __future__ import annotations

import pytest

from node.blobs.server import MAX_ROUNDS_KEPT, ServerStats, round_label


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "1",
        "1/",
        "/2",
        "a/b",
        "1/2/3",
        "-1/2",
        "1/2\x00",
        "１/２",  # full-width digits
        "١/٢",  # Arabic-Indic digits
        "1" * 13 + "/1",
        "1/" + "9" * 10_000,
        "1 / 2",
    ],
)
def test_garbage_round_header_attributes_nothing(value):
    assert round_label(value) == ""


def test_a_round_key_is_kept_as_sent():
    assert round_label(" 12/3 ") == "12/3"


def test_a_client_naming_a_new_round_each_time_cannot_grow_the_counters():
    st = ServerStats()
    for i in range(MAX_ROUNDS_KEPT * 5):
        st.count_sent("state", f"1/{i}", 10)
        st.count_received(f"1/{i}", 3)
    d = st.to_dict()
    assert len(d["sent_by_round"]) <= MAX_ROUNDS_KEPT
    assert len(d["received_by_round"]) <= MAX_ROUNDS_KEPT
    # the totals still count every byte
    assert d["sent_by_kind"]["state"] == 10 * MAX_ROUNDS_KEPT * 5
    assert f"1/{MAX_ROUNDS_KEPT * 5 - 1}" in d["sent_by_round"]  # the newest are kept
