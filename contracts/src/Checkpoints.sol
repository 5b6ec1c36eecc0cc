// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

/// @title Checkpoints: a light client of loconet's validator set (its settlement keys).
/// @notice The contract keeps only the hash of the current signer set. A checkpoint comes with
///         that set (addresses ascending, powers, and the power of the validators that have no
///         settlement key) in calldata, and signatures of set members in ascending signer order;
///         it is accepted when the recovered signers carry more than 2/3 of the set's *whole*
///         power (a validator without a key counts as not signing). A checkpoint commits to the
///         next set by hash; when that hash differs from the current one, the new set is passed
///         along and becomes current (a valset update, signed by the outgoing set).
///
///         The digest names this deployment (EVM chain id and this contract's address, as
///         Gravity Bridge's peggy id does), so a checkpoint never replays on another contract:
///
///         digest = keccak256(abi.encode(
///             keccak256("loconet.Checkpoint.v2"), keccak256(bytes(loconetChainId)),
///             uint256 block.chainid, address(this),
///             uint64 number, uint64 height, bytes32 appHash, bytes32 rewardsRoot, bytes32 nextSetHash))
///         setHash = keccak256(abi.encode(address[] signers, uint256[] powers, uint256 keylessPower))
///         signature = 65 bytes r || s || v over the digest itself (no message prefix), low s.
///
///         Blast radius: numbers may skip but by at most MAX_NUMBER_GAP (no forged number can
///         exhaust the number space); the last ROOT_HISTORY rewards roots stay claimable (a newer
///         checkpoint never makes a claim in flight revert); the guardian may pause (see
///         RewardsDistributor for the mint rate limit).
contract Checkpoints {
    bytes32 public constant CHECKPOINT_TYPEHASH = keccak256("loconet.Checkpoint.v2");
    uint64 public constant MAX_NUMBER_GAP = 1000;
    uint256 public constant ROOT_HISTORY = 64;

    struct Checkpoint {
        uint64 number;
        uint64 height;
        bytes32 appHash;
        bytes32 rewardsRoot;
        bytes32 nextSetHash;
    }

    struct SignerSet {
        address[] signers; // strictly ascending
        uint256[] powers; // > 0 each
        uint256 keylessPower; // power of the chain's validators without a settlement key
    }

    bytes32 public immutable chainIdHash;
    string public loconetChainId;
    bytes32 public setHash;
    uint64 public lastNumber;
    uint64 public lastHeight;
    address public guardian;
    bool public paused;
    bytes32 public lastAppHash;
    /// rewardsRoots[number % ROOT_HISTORY]: the roots of the last ROOT_HISTORY checkpoints
    bytes32[64] public rewardsRoots;

    event CheckpointAccepted(uint64 indexed number, uint64 height, bytes32 appHash, bytes32 rewardsRoot, bytes32 nextSetHash);
    event SignerSetChanged(uint64 indexed number, bytes32 setHash, uint256 size, uint256 totalPower);
    event Paused(address guardian);
    event Unpaused(address guardian);
    event GuardianChanged(address from, address to);

    error StaleNumber(uint64 number, uint64 lastNumber);
    error NumberGapTooLarge(uint64 number, uint64 lastNumber);
    error WrongSet(bytes32 given, bytes32 current);
    error WrongNextSet(bytes32 given, bytes32 committed);
    error BadSet();
    error SignersNotAscending(uint256 position);
    error SignerOutOfRange(uint256 index);
    error BadSignature(uint256 position);
    error NotEnoughPower(uint256 signed, uint256 total);
    error LengthMismatch();
    error IsPaused();
    error NotGuardian(address caller);

    constructor(
        string memory chainId_,
        address[] memory signers,
        uint256[] memory powers,
        uint256 keylessPower,
        uint64 startNumber,
        address guardian_
    ) {
        _checkSet(signers, powers);
        loconetChainId = chainId_;
        chainIdHash = keccak256(bytes(chainId_));
        setHash = hashSet(signers, powers, keylessPower);
        lastNumber = startNumber;
        guardian = guardian_;
        emit SignerSetChanged(startNumber, setHash, signers.length, _total(powers) + keylessPower);
    }

    // ------------------------------------------------------------------ guardian

    modifier onlyGuardian() {
        if (msg.sender != guardian) revert NotGuardian(msg.sender);
        _;
    }

    modifier whenNotPaused() {
        if (paused) revert IsPaused();
        _;
    }

    /// Stops checkpoints and claims (and so every mint) until unpause. The guardian's only power
    /// besides unpause and handing the role on: it can neither mint, nor change the signer set,
    /// nor accept a checkpoint.
    function pause() external onlyGuardian {
        paused = true;
        emit Paused(msg.sender);
    }

    function unpause() external onlyGuardian {
        paused = false;
        emit Unpaused(msg.sender);
    }

    /// address(0) renounces the role for good (nobody can pause any more).
    function setGuardian(address to) external onlyGuardian {
        emit GuardianChanged(guardian, to);
        guardian = to;
    }

    // ------------------------------------------------------------------ checkpoints

    function hashSet(address[] memory signers, uint256[] memory powers, uint256 keylessPower)
        public
        pure
        returns (bytes32)
    {
        return keccak256(abi.encode(signers, powers, keylessPower));
    }

    function digest(Checkpoint calldata cp) public view returns (bytes32) {
        return keccak256(
            abi.encode(
                CHECKPOINT_TYPEHASH,
                chainIdHash,
                block.chainid,
                address(this),
                cp.number,
                cp.height,
                cp.appHash,
                cp.rewardsRoot,
                cp.nextSetHash
            )
        );
    }

    function rewardsRoot() public view returns (bytes32) {
        return rewardsRoots[lastNumber % ROOT_HISTORY];
    }

    /// @param current     the current set (must hash to setHash)
    /// @param signerIndices strictly ascending positions in `current.signers` of who signed
    /// @param signatures  one 65-byte signature per entry of signerIndices
    /// @param next        the next set when cp.nextSetHash != setHash (else empty arrays)
    function submit(
        Checkpoint calldata cp,
        SignerSet calldata current,
        uint256[] calldata signerIndices,
        bytes[] calldata signatures,
        SignerSet calldata next
    ) external whenNotPaused {
        uint64 last = lastNumber;
        if (cp.number <= last) revert StaleNumber(cp.number, last);
        if (cp.number - last > MAX_NUMBER_GAP) revert NumberGapTooLarge(cp.number, last);
        bytes32 currentHash = hashSet(current.signers, current.powers, current.keylessPower);
        if (currentHash != setHash) revert WrongSet(currentHash, setHash);
        if (signerIndices.length != signatures.length) revert LengthMismatch();
        uint256 signed = _signedPower(digest(cp), current, signerIndices, signatures);
        uint256 total = _total(current.powers) + current.keylessPower;
        if (signed * 3 <= total * 2) revert NotEnoughPower(signed, total);
        if (cp.nextSetHash != currentHash) {
            _checkSet(next.signers, next.powers);
            bytes32 nextHash = hashSet(next.signers, next.powers, next.keylessPower);
            if (nextHash != cp.nextSetHash) revert WrongNextSet(nextHash, cp.nextSetHash);
            setHash = nextHash;
            emit SignerSetChanged(cp.number, nextHash, next.signers.length, _total(next.powers) + next.keylessPower);
        }
        lastNumber = cp.number;
        lastHeight = cp.height;
        lastAppHash = cp.appHash;
        rewardsRoots[cp.number % ROOT_HISTORY] = cp.rewardsRoot;
        emit CheckpointAccepted(cp.number, cp.height, cp.appHash, cp.rewardsRoot, cp.nextSetHash);
    }

    function _signedPower(
        bytes32 d,
        SignerSet calldata set,
        uint256[] calldata signerIndices,
        bytes[] calldata signatures
    ) private pure returns (uint256 signed) {
        uint256 prev;
        for (uint256 i = 0; i < signerIndices.length; ++i) {
            uint256 idx = signerIndices[i];
            if (i > 0 && idx <= prev) revert SignersNotAscending(i);
            if (idx >= set.signers.length) revert SignerOutOfRange(idx);
            // tryRecover refuses malleable (high-s) signatures and v other than 27/28
            (address who, ECDSA.RecoverError err,) = ECDSA.tryRecover(d, signatures[i]);
            if (err != ECDSA.RecoverError.NoError || who != set.signers[idx]) revert BadSignature(i);
            signed += set.powers[idx];
            prev = idx;
        }
    }

    function _checkSet(address[] memory signers, uint256[] memory powers) private pure {
        if (signers.length == 0 || signers.length != powers.length) revert BadSet();
        for (uint256 i = 0; i < signers.length; ++i) {
            if (powers[i] == 0) revert BadSet();
            if (i > 0 && signers[i] <= signers[i - 1]) revert BadSet();
        }
    }

    function _total(uint256[] memory powers) private pure returns (uint256 t) {
        for (uint256 i = 0; i < powers.length; ++i) t += powers[i];
    }
}
