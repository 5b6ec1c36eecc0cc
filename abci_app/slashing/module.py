from abci_app.module import ModuleSpec

MODULE = ModuleSpec(name="slashing")
