"""auth: accounts (public key and sequence) and the ante checks every signed tx passes."""
