from abci_app.errors import LoconetError


class BankError(LoconetError):
    codespace = "bank"


class ErrInsufficientFunds(BankError):
    code = 101


class ErrInvalidAmount(BankError):
    code = 102


class ErrSendToModule(BankError):
    code = 103
