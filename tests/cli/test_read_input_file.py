"""node.client.inputs.read_input_file: memory follows the file, not the cap; the cap and non-files
refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from node.client.inputs import read_input_file
from node.errors import UsageError


def test_a_huge_cap_reads_a_small_file(tmp_path: Path) -> None:
    # the payload cap is 64 GiB: f.read(cap + 1) allocated it all up front (MemoryError on a
    # 24 GiB machine, a traceback from `tx round submit-update --payload-file`)
    f = tmp_path / "payload.bin"
    f.write_bytes(b"x" * 123_456)
    assert read_input_file(str(f), "payload file", limit=1 << 40) == b"x" * 123_456


def test_a_file_of_exactly_the_cap_is_read_one_byte_more_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"y" * 3_000_000)
    assert len(read_input_file(str(f), "f", limit=3_000_000)) == 3_000_000
    with pytest.raises(UsageError, match="larger than"):
        read_input_file(str(f), "f", limit=2_999_999)


def test_dev_zero_and_folders_are_refused_without_reading(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a regular file"):
        read_input_file("/dev/zero", "f", limit=1 << 40)
    with pytest.raises(UsageError, match="a folder"):
        read_input_file(str(tmp_path), "f")


def test_a_shell_pipe_is_read_up_to_the_cap(tmp_path: Path) -> None:
    r, w = os.pipe()
    os.write(w, b"z" * 5000)
    os.close(w)
    try:
        with pytest.raises(UsageError, match="larger than"):
            read_input_file(f"/dev/fd/{r}", "f", limit=4999)
    finally:
        os.close(r)
    r, w = os.pipe()
    os.write(w, b"z" * 5000)
    os.close(w)
    try:
        assert read_input_file(f"/dev/fd/{r}", "f", limit=5000) == b"z" * 5000
    finally:
        os.close(r)
