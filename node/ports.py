"""Local port checks shared by `loconet start`, `loconet testnet`, the demo and the tests."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterable


def is_port_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:port (SO_REUSEADDR: TIME_WAIT does not count)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def find_free_base(candidates: Iterable[int], offsets: Iterable[int]) -> int:
    """The first base port p among ``candidates`` with every p + offset free."""
    offs = tuple(offsets)
    for base in candidates:
        if all(is_port_free(base + o) for o in offs):
            return base
    raise RuntimeError("no free port range found: stop other nodes or pass another base port")


def random_bases(lo: int, hi: int, step: int, tries: int = 200) -> list[int]:
    """Random candidate bases (tests pick ranges unlikely to collide with a user's node)."""
    rng = random.Random()
    return [rng.randrange(lo, hi, step) for _ in range(tries)]
