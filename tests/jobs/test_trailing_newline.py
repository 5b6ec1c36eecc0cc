"""Strings with a trailing newline (red-team regression): the validators' regexes ended in ``$``,
which in Python also matches before a final "\\n", so a region ``eu-west\\n``, an endpoint or blob
source ``http://host/\\n``, a GPU model ``H100\\n`` or a job's stack ``...\\n`` were accepted and
stored (a second spelling of the same value, and a line break inside every table and log line
that prints it). They now end in ``\\Z``."""

from __future__ import annotations

import pytest

from abci_app.jobs.errors import ErrInvalidJobSpec, ErrInvalidLocation
from abci_app.providers.errors import ErrInvalidEndpoint, ErrInvalidHardware, ErrInvalidRegion
from abci_app.validation import is_http_url
from tests.kits.chainkit import assert_rejected
from tests.kits.marketkit import create_job_msg, new_market, register_msg


@pytest.mark.parametrize(
    "kw,err",
    [
        ({"region": "eu-west\n"}, ErrInvalidRegion),
        ({"endpoint": "http://10.0.0.1:26680/\n"}, ErrInvalidEndpoint),
        ({"hardware": [("H100\n", 8, 81920)]}, ErrInvalidHardware),
    ],
)
def test_invalid_provider_field_with_trailing_newline(kw: dict, err: type) -> None:
    m = new_market(n_providers=1, register=False)
    assert_rejected(m.chain, m.tx(m.providers[0], register_msg(**kw)), err)


@pytest.mark.parametrize(
    "spec,err",
    [
        ({"blob_sources": ["http://10.0.0.1:26680\n"]}, ErrInvalidLocation),
        ({"stack": "torch-2.4\n", "determinism_mode": 1, "tolerance_ppm": 0}, ErrInvalidJobSpec),
    ],
)
def test_invalid_job_field_with_trailing_newline(spec: dict, err: type) -> None:
    m = new_market(n_providers=1)
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(**spec)), err)


def test_urls_still_accepted() -> None:
    assert is_http_url("http://10.0.0.1:26680/blob/x?y=1") and not is_http_url(
        "http://10.0.0.1\r\n"
    )


@pytest.mark.parametrize("url", ["http://[:::::]:26680", "http://[1.2.3]:1", "http://[:]"])
def test_invalid_blob_source_that_no_client_can_fetch(url: str) -> None:
    """The URL rule took any of [0-9A-Fa-f:.] in brackets: a job owner could list a source like
    http://[:::::]:26680 first, and every worker's fetch raised httpx.InvalidURL there instead
    of trying the next source (drawn providers then missed their commits). Refused now."""
    m = new_market(n_providers=1)
    assert_rejected(m.chain, m.tx(m.owner, create_job_msg(blob_sources=[url])), ErrInvalidLocation)
    assert is_http_url("http://[::1]:26680")
