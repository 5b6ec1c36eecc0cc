#!/usr/bin/env bash
# The seeded DiLoCo table (benchmarks/diloco_seeds.py) on a ~25 M-parameter model, on one GPU,
# in under 10 minutes (issue 15). NOT YET RUN: no GPU was lent to the session that wrote it.
# Sizing (estimated, not measured): 8 layers x 512 wide, context 256 -> ~25.7 M parameters;
# 4 workers x 16 sequences x 256 tokens = 16 k tokens per global step; 1000 steps per worker
# (50 outer rounds of H 20); 5 rows x 3 seeds = 15 runs; the W workers run as one vmapped model.
# TF32 matmuls are allowed (a benchmark, not a verifiable run). Everything is written as it goes
# to $OUT/progress.jsonl, so a run cut off by `timeout` still leaves its finished runs.
#
#   bash benchmarks/gpu_table.sh [OUT]        # OUT defaults to benchmarks/gpu_table_out
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks/gpu_table_out}"
PY="${PY:-.venv/bin/python}"
DATA="${DATA:-../shared/data/tinyshakespeare.txt}"
[ -f "$DATA" ] || DATA=""
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/machine.txt" || true
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name(0))" | tee -a "$OUT/machine.txt"
# the batched simulation equals the per-worker loop on this device too (seconds)
LOCONET_TEST_DEVICE=cuda "$PY" -m pytest -q tests/trainer/test_batched.py 2>&1 | tail -2
"$PY" benchmarks/batched_speed.py ${DATA:+"$DATA"} --device cuda 2>&1 | tee "$OUT/batched_speed.txt"
timeout 540 "$PY" benchmarks/diloco_seeds.py ${DATA:+--data "$DATA"} --device cuda \
    --model-size large --n-layer 8 --n-embd 512 --n-head 8 --workers 4 --batch-size 16 \
    --steps 1000 --H 20 --seeds 0,1,2 --warmup-frac 0.05 \
    --ar-lrs 1e-3,2e-3 --inner-lr 1e-3 --outer 0.7:0.9 \
    --codecs "int4,chunk:64/4096+int2@1.0:0:0.95" \
    --out "$OUT" --results "$OUT/RESULTS_gpu.md" 2>&1 | tee "$OUT/run.log"
