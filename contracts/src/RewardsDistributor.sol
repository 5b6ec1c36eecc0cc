// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";
import {LocoToken} from "./LocoToken.sol";
import {Checkpoints} from "./Checkpoints.sol";

/// @title RewardsDistributor: pays what loconet's settlement escrow holds for an EVM address.
/// @notice Claims are cumulative: the rewards root of the latest checkpoint commits to
///         (account, total ever withdrawn to it on loconet); a claim mints the difference to
///         what was already claimed. A claim is never paid twice, and a late claim is still
///         good against any later root.
///
///         leaf = keccak256(bytes.concat(keccak256(abi.encode(address account, uint256 cumulative))))
///         inner node = keccak256(sorted pair)  (OpenZeppelin MerkleProof)
///
///         It *is* the Checkpoints light client (inherits it): a claim reads the rewards root from
///         its own storage instead of calling another contract (a cold call costs 2,600 gas more).
contract RewardsDistributor is Checkpoints {
    LocoToken public immutable token;
    mapping(address => uint256) public claimed;

    event Claimed(address indexed account, uint256 amount, uint256 cumulative);

    error InvalidProof();
    error NothingToClaim(uint256 cumulative, uint256 alreadyClaimed);

    constructor(string memory chainId_, address[] memory signers, uint256[] memory powers, uint64 startNumber)
        Checkpoints(chainId_, signers, powers, startNumber)
    {
        token = new LocoToken(address(this));
    }

    function leaf(address account, uint256 cumulative) public pure returns (bytes32) {
        return keccak256(bytes.concat(keccak256(abi.encode(account, cumulative))));
    }

    function claim(address account, uint256 cumulative, bytes32[] calldata proof) external {
        if (!MerkleProof.verifyCalldata(proof, rewardsRoot, leaf(account, cumulative))) {
            revert InvalidProof();
        }
        uint256 already = claimed[account];
        if (cumulative <= already) revert NothingToClaim(cumulative, already);
        claimed[account] = cumulative;
        token.mint(account, cumulative - already);
        emit Claimed(account, cumulative - already, cumulative);
    }
}
