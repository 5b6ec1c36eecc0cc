"""providers: GPU providers, bonds (module account), status, reputation, provider slashing."""
