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
