from abci_app.auth.keys import KEY_PREFIXES
from abci_app.module import ModuleSpec

MODULE = ModuleSpec(name="auth", key_prefixes=KEY_PREFIXES)
