// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";
import {LocoToken} from "./LocoToken.sol";
import {Checkpoints} from "./Checkpoints.sol";

/// @title RewardsDistributor: pays what loconet's settlement escrow holds for an EVM address.
/// @notice Claims are cumulative: a rewards root commits to (account, total ever withdrawn to
///         it on loconet); a claim mints the difference to what was already claimed. A claim
///         names the checkpoint whose root its proof is against, and any of the last
///         ROOT_HISTORY accepted roots is good: a checkpoint posted while a claim is in flight
///         never makes it revert, and since cumulatives only grow, an older root can never pay
///         more than a newer one.
///
///         Mints are rate limited: at most `mintLimit` token units per `mintWindow` seconds,
///         all accounts together. A claim over what the window has left is paid what is left
///         (the rest stays claimable: `claimed` records what was paid); with nothing left it
///         reverts with RateLimited. This bounds what a forged checkpoint (signed by >2/3 of
///         the set) can mint before the guardian pauses and loconet slashes its signers.
///
///         leaf = keccak256(bytes.concat(keccak256(abi.encode(address account, uint256 cumulative))))
///         inner node = keccak256(sorted pair)  (OpenZeppelin MerkleProof)
///
///         It *is* the Checkpoints light client (inherits it): a claim reads the rewards root from
///         its own storage instead of calling another contract (a cold call costs 2,600 gas more).
contract RewardsDistributor is Checkpoints {
    LocoToken public immutable token;
    uint256 public immutable mintLimit;
    uint64 public immutable mintWindow;
    mapping(address => uint256) public claimed;
    uint64 public windowStart;
    uint192 public mintedInWindow;

    event Claimed(address indexed account, uint256 amount, uint256 cumulative);

    error InvalidProof();
    error NothingToClaim(uint256 cumulative, uint256 alreadyClaimed);
    error RateLimited(uint256 nextWindowAt);

    constructor(
        string memory chainId_,
        address[] memory signers,
        uint256[] memory powers,
        uint256 keylessPower,
        uint64 startNumber,
        address guardian_,
        uint256 mintLimit_,
        uint64 mintWindow_
    ) Checkpoints(chainId_, signers, powers, keylessPower, startNumber, guardian_) {
        require(mintLimit_ > 0 && mintLimit_ < type(uint192).max && mintWindow_ > 0, "bad rate limit");
        mintLimit = mintLimit_;
        mintWindow = mintWindow_;
        token = new LocoToken(address(this));
    }

    function leaf(address account, uint256 cumulative) public pure returns (bytes32) {
        return keccak256(bytes.concat(keccak256(abi.encode(account, cumulative))));
    }

    /// What a claim could mint now, all accounts together.
    function mintAllowance() public view returns (uint256) {
        if (block.timestamp >= uint256(windowStart) + mintWindow) return mintLimit;
        return mintLimit - mintedInWindow;
    }

    /// @param number the checkpoint whose rewards root `proof` is against (one of the last
    ///        ROOT_HISTORY accepted). The slot `number % ROOT_HISTORY` only ever holds a root of
    ///        an accepted checkpoint (or zero, which no proof reaches), and an accepted root can
    ///        never pay more than is escrowed: no need to read lastNumber.
    function claim(address account, uint256 cumulative, uint64 number, bytes32[] calldata proof)
        external
        whenNotPaused
    {
        bytes32 root = rewardsRoots[number % ROOT_HISTORY];
        if (!MerkleProof.verifyCalldata(proof, root, leaf(account, cumulative))) {
            revert InvalidProof();
        }
        uint256 already = claimed[account];
        if (cumulative <= already) revert NothingToClaim(cumulative, already);
        uint256 owed = cumulative - already;
        uint64 start = windowStart;
        uint256 minted = mintedInWindow;
        if (block.timestamp >= uint256(start) + mintWindow) {
            start = uint64(block.timestamp);
            minted = 0;
        }
        uint256 left = mintLimit - minted;
        if (left == 0) revert RateLimited(uint256(start) + mintWindow);
        uint256 pay = owed < left ? owed : left;
        windowStart = start;
        mintedInWindow = uint192(minted + pay);
        claimed[account] = already + pay;
        token.mint(account, pay);
        emit Claimed(account, pay, already + pay);
    }
}
