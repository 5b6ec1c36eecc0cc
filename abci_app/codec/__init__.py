"""Transaction envelope, signatures and addresses. Generated stubs live in ``gen/`` (not
committed)."""
