"""reputation: the integer rules that move a provider's reputation (0..10000). Pure maths;
the value itself lives in the provider record (abci_app/providers)."""
