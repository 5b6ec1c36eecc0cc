"""Red-team (defence in depth): a location the client cannot even connect to must be one
failed attempt (PeerUnavailable) and the next location tried. Three spellings escape fetch()
as ValueError/UnicodeError instead, so the locations after them are never tried; in
ProviderWorker.judge a ValueError is read as "served trace is malformed" and the verifier
votes INVALID at once. The chain's is_http_url refuses these spellings, so only a lying RPC
node (or a CLI --from) can supply them."""

import pytest

from node.blobs import BlobClient, BlobStore, FetchFailed


@pytest.mark.parametrize(
    "loc",
    ["http://h:" + "9" * 5000, "http://" + "a" * 64 + ".example", "http://a..b/"],
    ids=["5000-digit-port", "64-char-label", "empty-label"],
)
def test_unusable_location_is_one_failed_attempt(tmp_path, loc: str) -> None:
    with pytest.raises(FetchFailed) as e:
        BlobClient(timeout_s=2.0).fetch(
            "ab" * 32, [loc, "http://127.0.0.1:1"], BlobStore(tmp_path / "s")
        )
    assert len(e.value.attempts) == 2  # the second location was tried too
