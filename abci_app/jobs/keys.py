"""jobs state layout (see README.md)::

0x50                                           -> JobsParams
0x51                                           -> u64 next job id
0x52 | u64 job                                 -> Job
0x53 | u64 job | u64 round                     -> Round
0x54 | u64 height | u64 job | u64 round        -> b""  (round transition due at height)
0x55 | u64 height | u64 job                    -> b""  (job's next round opens at height)
0x56 | len(addr) | addr                        -> SLA figures of a provider (sla.py: u64 counters)
"""

from abci_app.bank.keys import module_address
from abci_app.encoding import KeyReader, lp, u64_key

PARAMS_KEY = b"\x50"
NEXT_JOB_ID_KEY = b"\x51"
JOB_PREFIX = b"\x52"
ROUND_PREFIX = b"\x53"
ROUND_DUE_PREFIX = b"\x54"
OPEN_DUE_PREFIX = b"\x55"
SLA_PREFIX = b"\x56"
# every key this module writes starts with one of these (ModuleSpec.key_prefixes)
KEY_PREFIXES: tuple[bytes, ...] = (
    PARAMS_KEY,
    NEXT_JOB_ID_KEY,
    JOB_PREFIX,
    ROUND_PREFIX,
    ROUND_DUE_PREFIX,
    OPEN_DUE_PREFIX,
    SLA_PREFIX,
)

# Module account holding every job's escrow (no key can sign for it).
JOB_ESCROW = module_address("job_escrow")


def job_key(job_id: int) -> bytes:
    return JOB_PREFIX + u64_key(job_id)


def parse_job_key(key: bytes) -> int:
    """Inverse of ``job_key``: the job id."""
    r = KeyReader(key, JOB_PREFIX)
    job_id = r.u64()
    r.end()
    return job_id


def round_key(job_id: int, round_: int) -> bytes:
    return ROUND_PREFIX + u64_key(job_id) + u64_key(round_)


def parse_round_key(key: bytes) -> tuple[int, int]:
    """Inverse of ``round_key``: (job id, round)."""
    r = KeyReader(key, ROUND_PREFIX)
    job_id, round_ = r.u64(), r.u64()
    r.end()
    return job_id, round_


def round_prefix(job_id: int) -> bytes:
    return ROUND_PREFIX + u64_key(job_id)


def round_due_key(height: int, job_id: int, round_: int) -> bytes:
    return ROUND_DUE_PREFIX + u64_key(height) + u64_key(job_id) + u64_key(round_)


def parse_round_due_key(key: bytes) -> tuple[int, int, int]:
    """Inverse of ``round_due_key``: (height, job id, round)."""
    r = KeyReader(key, ROUND_DUE_PREFIX)
    height, job_id, round_ = r.u64(), r.u64(), r.u64()
    r.end()
    return height, job_id, round_


def open_due_key(height: int, job_id: int) -> bytes:
    return OPEN_DUE_PREFIX + u64_key(height) + u64_key(job_id)


def parse_open_due_key(key: bytes) -> tuple[int, int]:
    """Inverse of ``open_due_key``: (height, job id)."""
    r = KeyReader(key, OPEN_DUE_PREFIX)
    height, job_id = r.u64(), r.u64()
    r.end()
    return height, job_id


def sla_key(address: bytes) -> bytes:
    return SLA_PREFIX + lp(address)


def parse_sla_key(key: bytes) -> bytes:
    """Inverse of ``sla_key``: the provider address."""
    r = KeyReader(key, SLA_PREFIX)
    address = r.lp()
    r.end()
    return address
