"""Exploration runs behind the DiLoCo table (small model, 4 workers, 1000 steps/worker).

Each argument is one run: comma-separated key=value: c=codec spec, H (default 50), lr / m
(outer lr, Nesterov momentum; default 0.7 / 0.9), ef (error-feedback decay, default 1),
ov=eager|delayed (one-step-delay overlap), fam (adaptive family), mt (adaptive min_tighten).
Prints one JSON line per run (final val loss, bytes per worker, reduction vs the fp32
AllReduce bytes of 1000 steps = 821,760,000, seconds, every other point of the val curve).
"""

import json
import sys
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from trainer.data import Corpus
from trainer.diloco import OuterConfig, SimConfig, simulate
from trainer.model import GPTConfig

corpus = Corpus.from_file(
    __import__("os").environ.get("DATA", "../shared/data/tinyshakespeare.txt")
)
steps = 1000
for spec in sys.argv[1:]:
    d = dict(kv.split("=") for kv in spec.split(","))
    H = int(d.get("H", 50))
    lr = float(d.get("lr", 0.7))
    m = float(d.get("m", 0.9))
    sim = SimConfig(
        workers=4,
        model=GPTConfig.preset("small"),
        batch_size=8,
        rounds=steps // H,
        inner_steps=H,
        compression=d.get("c", "none") + ("/" + d["fam"] if d.get("fam", "topk") != "topk" else ""),
        ef_decay=float(d.get("ef", 1.0)),
        overlap=d.get("ov", "") != "",
        overlap_mode=d.get("ov", "eager") or "eager",
        adaptive_min_tighten=float(d.get("mt", 0.125)),
        outer=OuterConfig(lr=lr, momentum=m, nesterov=m > 0),
    )
    t0 = time.time()
    r = simulate(corpus, sim)
    print(
        json.dumps(
            {
                "spec": spec,
                "val": round(r["final_val_loss"], 4),
                "bytes": r["bytes_per_worker"],
                "red": round(821760000 / r["bytes_per_worker"]),
                "s": round(time.time() - t0),
                "curve": [round(p["val_loss"], 3) for p in r["val_curve"]][::2],
            }
        ),
        flush=True,
    )
