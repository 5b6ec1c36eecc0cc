"""jobs and rounds errors: codes 500..599 (stable, never reused)."""

from abci_app.errors import LoconetError


class JobsError(LoconetError):
    codespace = "jobs"


class ErrJobNotFound(JobsError):
    code = 501


class ErrRoundNotFound(JobsError):
    code = 502


class ErrWrongPhase(JobsError):
    """Too early or too late for this message in the round's phase machine."""

    code = 503


class ErrNotSelected(JobsError):
    code = 504


class ErrDuplicate(JobsError):
    code = 505


class ErrWrongBaseModel(JobsError):
    code = 506


class ErrInvalidHash(JobsError):
    code = 507


class ErrInvalidCommitment(JobsError):
    code = 508


class ErrInvalidLocation(JobsError):
    code = 509


class ErrNotChallenged(JobsError):
    code = 510


class ErrWrongSegment(JobsError):
    code = 511


class ErrBadProof(JobsError):
    code = 512


class ErrNotRevealed(JobsError):
    code = 513


class ErrNotVerifier(JobsError):
    code = 514


class ErrInvalidQuality(JobsError):
    code = 515


class ErrNotAttester(JobsError):
    code = 516


class ErrInvalidJobSpec(JobsError):
    code = 517


class ErrInvalidReward(JobsError):
    code = 518


class ErrInvalidRounds(JobsError):
    code = 519


class ErrUnauthorized(JobsError):
    code = 520


class ErrJobNotActive(JobsError):
    code = 521


class ErrCopiedCommitment(JobsError):
    """update_root or trace_root already committed by another participant of the round (or one
    participant's update_root reused as another's trace_root). Since roots are bound to their
    provider (523 is checked first) a copy cannot reach this check; kept as defence in depth."""

    code = 522


class ErrUnboundCommitment(JobsError):
    """update_root or trace_root is not bound to the signer: the proof of leaf 0 =
    binding_leaf(kind, signer, job, round, base_model_hash) (abci_app.merkle) does not verify.
    A root copied from another provider always fails here."""

    code = 523


# -- incentives (docs/threat-model.md "Why cheating does not pay"): 530..539 ---------------------


class ErrVoteMismatch(JobsError):
    """MsgRevealVote does not open the vote committed with MsgVerdict (hash differs), or the
    verifier committed nothing."""

    code = 530


class ErrBadEvidence(JobsError):
    """A vote's evidence contradicts it: a valid vote must carry the end states its re-execution
    reached, each the committed trace leaf of an opened end (secret in exact mode); an invalid
    vote states that differ in one."""

    code = 531


class ErrCannotDecline(JobsError):
    """MsgDeclineRound after the participant committed (or outside the commit window)."""

    code = 532


class ErrBadTraceList(JobsError):
    """MsgRevealSegment's trace list is not the committed trace: its length is not H/k + 1
    hashes, its sha256 is not trace_list_hash, its bound root is not the committed trace root,
    or a later opening names another trace_list_hash than the participant's first."""

    code = 533


class ErrBadProbe(JobsError):
    """A tolerance-mode probe is malformed or out of place: MsgSubmitUpdate's probe_root missing
    in tolerance mode (or given in exact mode), MsgOpenEnd on an exact-mode job or with a probe
    that is not PROBE_DIM integers within range (abci_app/jobs/probe.py), or a vote's probes that
    are not PROBE_DIM per opened segment or not its evidence."""

    code = 534
