from abci_app.encoding import lp

VALIDATOR_PREFIX = b"\x10"


def validator_key(cons_address: bytes) -> bytes:
    """0x10 | len(consaddr) | consaddr -> state_pb2.Validator"""
    return VALIDATOR_PREFIX + lp(cons_address)
