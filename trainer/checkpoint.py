"""Checkpoint and resume of ``loconet train simulate`` (safetensors).

One file, written after every round (to ``PATH.tmp``, then renamed: a crash leaves the last
complete checkpoint). Tensors, float32 or as trained, by name:

    global/NAME                  the global model
    outer/NAME                   the outer SGD's momentum buffer
    wI/adam/NAME/{step,exp_avg,exp_avg_sq}   worker I's AdamW state
    wI/residual/NAME, wI/qwarm/NAME          worker I's error feedback and PowerSGD warm start
    pending/NAME, known_base/NAME            overlap: the aggregate in flight, the known base
    last_local/PROVIDER/NAME                 overlap (eager): each worker's last update

and in the safetensors metadata, ``loconet`` = JSON: format version, the run's config (minus
``rounds``), the next round, the log so far, counters, each worker's ``sent`` counter and the
compression policy's JSON-able fields (the adaptive policy's phase, tighten factor and log).

Resuming restores all of it into a freshly built run, so the rounds that follow compute
exactly what an uninterrupted run computes (``tests/trainer/test_trainer_cli.py`` checks the
final model hash). Worker models need no saving: every round starts by loading the base.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

FORMAT = 1
_IGNORED_CONFIG = ("rounds", "device", "threads")


class CheckpointError(ValueError):
    pass


def _config_key(sim: Any) -> dict[str, Any]:
    d = sim.to_dict()
    return {k: v for k, v in d.items() if k not in _IGNORED_CONFIG}


def _policy_fields(policy: Any) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(policy):
        v = getattr(policy, f.name)
        try:
            json.dumps(v)
        except TypeError:
            continue
        out[f.name] = v
    return out


def write_safetensors(
    path: str | Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]
) -> None:
    """``path`` holds the old file or the whole new one, whatever stops the process or the
    machine: a temp name of its own in the same folder (two runs on one path do not share it),
    fsynced before the rename, the folder after (nothing was fsynced before)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=metadata)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def save_simulation(
    path: str | Path,
    sim: Any,
    next_round: int,
    gmodel: Any,
    outer: Any,
    workers: list[Any],
    policy: Any,
    *,
    log: dict[str, Any],
    pending: dict[str, torch.Tensor] | None,
    last_local: dict[str, dict[str, torch.Tensor]],
    known_base: dict[str, torch.Tensor] | None,
    tokens: int,
    total_bytes: int,
    compute_s: float,
    prev_policy_loss: float,
) -> None:
    t: dict[str, torch.Tensor] = {}
    for n, p in gmodel.named_parameters():
        t[f"global/{n}"] = p.detach()
        mom = outer.opt.state.get(p, {}).get("momentum_buffer")
        if mom is not None:
            t[f"outer/{n}"] = mom
    workers_meta = []
    for i, w in enumerate(workers):
        wnames = {id(p): n for n, p in w.model.named_parameters()}
        for p, state in w.opt.state.items():
            for k, v in state.items():
                if isinstance(v, torch.Tensor):
                    t[f"w{i}/adam/{wnames[id(p)]}/{k}"] = v
        for n, v in w.cstate.residual.items():
            t[f"w{i}/residual/{n}"] = v
        for n, v in w.cstate.q_warm.items():
            t[f"w{i}/qwarm/{n}"] = v
        workers_meta.append({"provider": w.provider, "sent": w.cstate.sent})
    for n, v in (pending or {}).items():
        t[f"pending/{n}"] = v
    for n, v in (known_base or {}).items():
        t[f"known_base/{n}"] = v
    for prov, upd in last_local.items():
        for n, v in upd.items():
            t[f"last_local/{prov}/{n}"] = v
    meta = {
        "format": FORMAT,
        "config": _config_key(sim),
        "next_round": next_round,
        "log": log,
        "tokens": tokens,
        "total_bytes": total_bytes,
        "compute_s": compute_s,
        "prev_policy_loss": prev_policy_loss,
        "workers": workers_meta,
        "policy": _policy_fields(policy),
        "has_pending": pending is not None,
        "has_known_base": known_base is not None,
    }
    tensors = {k: v.detach().contiguous().cpu().clone() for k, v in t.items()}
    write_safetensors(path, tensors, {"loconet": json.dumps(meta)})


def load(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(
            f"no checkpoint at {path}: run without --resume first (it writes one every round)"
        )
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {}).get("loconet", "null"))
        tensors = load_file(str(path))
    except Exception as e:  # noqa: BLE001 (safetensors raises its own error types: a truncated or foreign file)
        raise CheckpointError(
            f"{path} is not a loconet checkpoint ({e.__class__.__name__}: {e})"
        ) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a loconet checkpoint of format {FORMAT}")
    return tensors, meta


def restore_simulation(
    path: str | Path | None, sim: Any, gmodel: Any, outer: Any, workers: list[Any], policy: Any
) -> dict[str, Any]:
    """Load the checkpoint into a freshly built run; returns the loop's variables."""
    if path is None:
        raise CheckpointError(
            "--resume needs --checkpoint PATH (or --out DIR: DIR/checkpoint.safetensors)"
        )
    t, meta = load(path)
    want, have = _config_key(sim), meta["config"]
    if want != have:
        diff = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
        raise CheckpointError(
            f"{path} was written by a run with other settings ({', '.join(diff)}): "
            "resume with the same flags (only --rounds, --device and --threads may change)"
        )
    if meta["next_round"] >= sim.rounds:
        raise CheckpointError(
            f"{path} is already at round {meta['next_round']}; ask for more --rounds to go on"
        )
    if len(meta["workers"]) != len(workers):
        raise CheckpointError(
            f"{path} holds {len(meta['workers'])} workers, this run has {len(workers)}"
        )
    dev = next(gmodel.parameters()).device
    with torch.no_grad():
        for n, p in gmodel.named_parameters():
            p.copy_(t[f"global/{n}"])
            if f"outer/{n}" in t:
                outer.opt.state[p]["momentum_buffer"] = t[f"outer/{n}"].to(dev)
    for i, w in enumerate(workers):
        wdev = next(w.model.parameters()).device
        for n, p in w.model.named_parameters():
            prefix = f"w{i}/adam/{n}/"
            st = {k[len(prefix) :]: v for k, v in t.items() if k.startswith(prefix)}
            if st:
                # AdamW keeps "step" on the CPU (capturable=False); the moments on the param's
                # device
                w.opt.state[p] = {k: (v if k == "step" else v.to(wdev)) for k, v in st.items()}
        w.cstate.residual = {
            k[len(f"w{i}/residual/") :]: v for k, v in t.items() if k.startswith(f"w{i}/residual/")
        }
        w.cstate.q_warm = {
            k[len(f"w{i}/qwarm/") :]: v for k, v in t.items() if k.startswith(f"w{i}/qwarm/")
        }
        w.cstate.sent = int(meta["workers"][i]["sent"])
    for k, v in meta["policy"].items():
        setattr(policy, k, v)

    def group(prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix) :]: v.to(dev) for k, v in t.items() if k.startswith(prefix)}

    last_local: dict[str, dict[str, torch.Tensor]] = {}
    for k, v in t.items():
        if k.startswith("last_local/"):
            prov, _, n = k[len("last_local/") :].partition("/")
            last_local.setdefault(prov, {})[n] = v
    return {
        "next_round": int(meta["next_round"]),
        "log": meta["log"],
        "tokens": int(meta["tokens"]),
        "total_bytes": int(meta["total_bytes"]),
        "compute_s": float(meta["compute_s"]),
        "prev_policy_loss": float(meta["prev_policy_loss"]),
        "pending": group("pending/") if meta["has_pending"] else None,
        "known_base": group("known_base/") if meta["has_known_base"] else None,
        "last_local": last_local,
    }
