"""Files named on the command line, read without hanging or running out of memory."""

from __future__ import annotations

import os
import stat

from node.errors import UsageError

MAX_INPUT_FILE = 64 << 20  # a JSON document, spec, payload or probe file given to a command


def read_input_file(path: str, what: str, limit: int = MAX_INPUT_FILE) -> bytes:
    """The bytes of a regular file named on the command line, at most ``limit``. A FIFO with no
    writer blocked the command for ever (open() waits for one) and ``/dev/zero`` was read until
    memory ran out: anything but a regular file, or one past ``limit``, is a UsageError. The
    shell's own pipes (``/dev/stdin``, ``<(cmd)`` as ``/dev/fd/N``) have a writer: read, capped."""
    try:
        st = os.stat(path)
        shell_pipe = path.startswith(("/dev/fd/", "/proc/self/fd/")) or path == "/dev/stdin"
        if not (stat.S_ISREG(st.st_mode) or (shell_pipe and stat.S_ISFIFO(st.st_mode))):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise UsageError(f"cannot read {what} {path}: it is {kind}; give a file")
        if stat.S_ISREG(st.st_mode) and st.st_size > limit:
            raise UsageError(f"cannot read {what} {path}: larger than {_fmt_limit(limit)}")
        # read in pieces: f.read(limit + 1) allocates the whole cap up front (a 64 GiB cap was a
        # MemoryError on a 24 GiB machine for a 120 KB file); memory follows the bytes there are
        parts: list[bytes] = []
        total = 0
        with open(path, "rb") as f:
            while total <= limit:
                piece = f.read(min(1 << 20, limit + 1 - total))
                if not piece:
                    break
                parts.append(piece)
                total += len(piece)
        data = b"".join(parts)
    except OSError as e:
        raise UsageError(f"cannot read {what} {path}: {e.strerror or e}") from None
    if len(data) > limit:
        raise UsageError(f"cannot read {what} {path}: larger than {_fmt_limit(limit)}")
    return data


def _fmt_limit(limit: int) -> str:
    """64 MiB, 64 KiB (``limit >> 20`` said "larger than 0 MiB" for a 64 KiB key file)."""
    if limit >= 1 << 20 and limit % (1 << 20) == 0:
        return f"{limit >> 20} MiB"
    if limit >= 1 << 10 and limit % (1 << 10) == 0:
        return f"{limit >> 10} KiB"
    return f"{limit} bytes"
