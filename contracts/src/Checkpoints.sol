// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

/// @title Checkpoints: a light client of loconet's validator set (its settlement keys).
/// @notice The contract keeps only the hash of the current signer set. A checkpoint comes with
///         that set (addresses ascending, powers) in calldata, and signatures of set members in
///         ascending signer order; it is accepted when the recovered signers carry more than
///         2/3 of the set's power. A checkpoint commits to the next set by hash; when that hash
///         differs from the current one, the new set is passed along and becomes current.
///
///         digest = keccak256(abi.encode(
///             keccak256("loconet.Checkpoint.v1"), keccak256(bytes(loconetChainId)),
///             uint64 number, uint64 height, bytes32 appHash, bytes32 rewardsRoot, bytes32 nextSetHash))
///         setHash = keccak256(abi.encode(address[] signers, uint256[] powers))
///         signature = 65 bytes r || s || v over the digest itself (no message prefix), low s.
contract Checkpoints {
    bytes32 public constant CHECKPOINT_TYPEHASH = keccak256("loconet.Checkpoint.v1");

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
    }

    bytes32 public immutable chainIdHash;
    string public loconetChainId;
    bytes32 public setHash;
    uint64 public lastNumber;
    uint64 public lastHeight;
    bytes32 public lastAppHash;
    bytes32 public rewardsRoot;

    event CheckpointAccepted(uint64 indexed number, uint64 height, bytes32 appHash, bytes32 rewardsRoot, bytes32 nextSetHash);
    event SignerSetChanged(uint64 indexed number, bytes32 setHash, uint256 size, uint256 totalPower);

    error StaleNumber(uint64 number, uint64 lastNumber);
    error WrongSet(bytes32 given, bytes32 current);
    error WrongNextSet(bytes32 given, bytes32 committed);
    error BadSet();
    error SignersNotAscending(uint256 position);
    error SignerOutOfRange(uint256 index);
    error BadSignature(uint256 position);
    error NotEnoughPower(uint256 signed, uint256 total);
    error LengthMismatch();

    constructor(string memory chainId_, address[] memory signers, uint256[] memory powers, uint64 startNumber) {
        _checkSet(signers, powers);
        loconetChainId = chainId_;
        chainIdHash = keccak256(bytes(chainId_));
        setHash = hashSet(signers, powers);
        lastNumber = startNumber;
        emit SignerSetChanged(startNumber, setHash, signers.length, _total(powers));
    }

    function hashSet(address[] memory signers, uint256[] memory powers) public pure returns (bytes32) {
        return keccak256(abi.encode(signers, powers));
    }

    function digest(Checkpoint calldata cp) public view returns (bytes32) {
        return keccak256(
            abi.encode(
                CHECKPOINT_TYPEHASH, chainIdHash, cp.number, cp.height, cp.appHash, cp.rewardsRoot, cp.nextSetHash
            )
        );
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
    ) external {
        if (cp.number <= lastNumber) revert StaleNumber(cp.number, lastNumber);
        bytes32 currentHash = hashSet(current.signers, current.powers);
        if (currentHash != setHash) revert WrongSet(currentHash, setHash);
        if (signerIndices.length != signatures.length) revert LengthMismatch();
        uint256 signed = _signedPower(digest(cp), current, signerIndices, signatures);
        uint256 total = _total(current.powers);
        if (signed * 3 <= total * 2) revert NotEnoughPower(signed, total);
        if (cp.nextSetHash != currentHash) {
            _checkSet(next.signers, next.powers);
            bytes32 nextHash = hashSet(next.signers, next.powers);
            if (nextHash != cp.nextSetHash) revert WrongNextSet(nextHash, cp.nextSetHash);
            setHash = nextHash;
            emit SignerSetChanged(cp.number, nextHash, next.signers.length, _total(next.powers));
        }
        lastNumber = cp.number;
        lastHeight = cp.height;
        lastAppHash = cp.appHash;
        rewardsRoot = cp.rewardsRoot;
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
