"""What a domain module gives the application (the Cosmos SDK's AppModule, in small).

Each package exposes ``MODULE = ModuleSpec(...)`` in its ``module.py``; ``abci_app/modules.py``
lists them in a fixed order, which is the order of genesis, begin-block and end-block hooks.
A module reaches another only through a small Protocol it declares itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from abci_app.context import Ctx
from abci_app.pb import abci
from abci_app.store import CacheKV, KVReader

Handler = Callable[[Ctx, bytes, Any], None]  # (ctx, signer address, message)
# -> (json, proven keys)
QueryFn = Callable[[KVReader, list[str], dict[str, str]], tuple[bytes, list[bytes]]]
GenesisFn = Callable[
    [CacheKV, dict[str, Any], abci.RequestInitChain], "list[abci.ValidatorUpdate] | None"
]
BlockHook = Callable[[Ctx], None]
EndBlockHook = Callable[[Ctx], "list[abci.ValidatorUpdate]"]
# raises InvariantBroken; returns uloco the module holds outside plain balances (0 if it uses
# module accounts)
InvariantFn = Callable[[KVReader], int]


@dataclass(frozen=True)
class ModuleSpec:
    name: str
    routes: Mapping[str, Handler] = field(default_factory=dict)  # Msg oneof field name -> handler
    queries: Mapping[str, QueryFn] = field(default_factory=dict)  # first path segment -> query
    init_genesis: GenesisFn | None = None
    begin_block: BlockHook | None = None
    end_block: EndBlockHook | None = None
    invariants: InvariantFn | None = None
    # the first bytes of every key the module writes (its keys.py KEY_PREFIXES); modules.py
    # refuses at import two modules whose prefixes overlap (one a prefix of the other)
    key_prefixes: tuple[bytes, ...] = ()
