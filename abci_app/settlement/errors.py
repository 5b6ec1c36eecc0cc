"""settlement errors: codes 700..799 (stable, never reused)."""

from abci_app.errors import LoconetError


class SettlementError(LoconetError):
    codespace = "settlement"


class ErrInvalidEvmAddress(SettlementError):
    code = 701


class ErrValidatorNotFound(SettlementError):
    code = 702


class ErrNotOperator(SettlementError):
    code = 703


class ErrInvalidKeyProof(SettlementError):
    code = 704


class ErrKeyInUse(SettlementError):
    code = 705


class ErrInvalidWithdrawal(SettlementError):
    code = 706


class ErrCheckpointNotPending(SettlementError):
    code = 707


class ErrInvalidCheckpointSignature(SettlementError):
    code = 708


class ErrNotForged(SettlementError):
    code = 709


class ErrInvalidEvidence(SettlementError):
    code = 710
