"""Stateless checks shared by the modules' messages (URLs)."""

from __future__ import annotations

import ipaddress
import re

MAX_URL_BYTES = 256
_URL = re.compile(
    r"^https?://"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])"
    r"(?::(?P<port>[0-9]{1,5}))?"
    r"(?:/[A-Za-z0-9\-._~%!$&'()*+,;=:@/]*)?"
    r"(?:\?[A-Za-z0-9\-._~%!$&'()*+,;=:@/?]*)?\Z"  # \Z: "$" would let a trailing newline in
)


def is_http_url(url: str) -> bool:
    """http(s)://host[:port][/path][?query]: ASCII, no spaces or fragments, <= 256 bytes, port
    1..65535, a bracketed host a real IPv6 address (``http://[:::::]:1`` passed, and every HTTP
    client refuses it: a job listing it first as a blob source stopped workers' fetches)."""
    if not url.isascii() or len(url) > MAX_URL_BYTES:
        return False
    m = _URL.match(url)
    if m is None:
        return False
    host = url.split("://", 1)[1]
    if host.startswith("["):  # the regex takes any of [0-9A-Fa-f:.]: "[:::::]" is no address
        try:
            ipaddress.IPv6Address(host[1 : host.index("]")])
        except ValueError:
            return False
    port = m.group("port")
    return port is None or 1 <= int(port) <= 65535
