// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";

/// @title LocoToken: loconet's LOCO on an EVM chain (6 decimals, like uloco on loconet).
/// @notice Minted only by the RewardsDistributor, against claims proven by validator-signed
///         checkpoints; every token in circulation is backed by uloco held in loconet's
///         settlement escrow.
contract LocoToken is ERC20 {
    address public immutable minter;

    error NotMinter(address caller);

    constructor(address minter_) ERC20("loconet LOCO", "LOCO") {
        minter = minter_;
    }

    function decimals() public pure override returns (uint8) {
        return 6;
    }

    function mint(address to, uint256 amount) external {
        if (msg.sender != minter) revert NotMinter(msg.sender);
        _mint(to, amount);
    }
}
