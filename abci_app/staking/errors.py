"""Staking errors: codespace "staking", codes 200..299 (stable, never reused)."""

from abci_app.errors import LoconetError


class StakingError(LoconetError):
    codespace = "staking"
    code = 200


class ErrValidatorExists(StakingError):
    code = 201


class ErrValidatorNotFound(StakingError):
    code = 202


class ErrSelfBondTooLow(StakingError):
    code = 203


class ErrInvalidMoniker(StakingError):
    code = 204


class ErrInvalidConsensusKey(StakingError):
    code = 205


class ErrInvalidStakeAmount(StakingError):
    code = 206


class ErrInsufficientBond(StakingError):
    code = 207


class ErrTooManyUnbondingEntries(StakingError):
    code = 208


class ErrNotOperator(StakingError):
    code = 209


class ErrNotJailed(StakingError):
    code = 210


class ErrValidatorTombstoned(StakingError):
    code = 211


class ErrStillJailed(StakingError):
    code = 212


class ErrLastValidator(StakingError):
    code = 213


class ErrStakeTooLarge(StakingError):
    """The bond would push a validator's tokens past 2^64-1 uloco or the total voting power past
    CometBFT's MaxTotalVotingPower (FinalizeBlock could not encode the update; CometBFT halts)."""

    code = 214
