"""providers errors: codes 400..499 (stable, never reused)."""

from abci_app.errors import LoconetError


class ProvidersError(LoconetError):
    codespace = "providers"


class ErrProviderExists(ProvidersError):
    code = 401


class ErrProviderNotFound(ProvidersError):
    code = 402


class ErrBondTooSmall(ProvidersError):
    code = 403


class ErrInvalidHardware(ProvidersError):
    code = 404


class ErrInvalidEndpoint(ProvidersError):
    code = 405


class ErrInvalidRegion(ProvidersError):
    code = 406


class ErrInvalidThroughput(ProvidersError):
    code = 407


class ErrProviderJailed(ProvidersError):
    code = 408


class ErrProviderExiting(ProvidersError):
    code = 409


class ErrNothingToUpdate(ProvidersError):
    code = 410


class ErrTombstoned(ProvidersError):
    code = 411


class ErrInvalidBond(ProvidersError):
    code = 412
