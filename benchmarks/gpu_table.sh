#!/usr/bin/env bash
# The seeded DiLoCo table (benchmarks/diloco_seeds.py) on a ~25 M-parameter model, on one GPU,
# in one call of at most 9 minutes (issues 15 and 34). NOT YET RUN on a GPU: no GPU was lent to
# the sessions that wrote it; `--dry-run` (tiny sizes, CPU) runs every line of it in CI
# (tests/trainer/test_gpu_table.py).
#
# Sizing: 8 layers x 512 wide, context 256 -> 25.6 M parameters; 4 workers x 16 sequences x 256
# tokens = 16 k tokens per global step; up to 1000 steps per worker (50 outer rounds of H 20);
# 5 rows x 3 seeds, each row's seeds x workers one vmapped model. TF32 matmuls are allowed (a
# benchmark, not a verifiable run).
# Time: before the table starts, diloco_seeds.py times one outer round of each kind of row and
# prints a per-row estimate (--budget-s); when the table would not fit the budget it lowers
# --steps to fit (the table's header says what ran). The codecs run on the CPU, a round's 12
# payloads in a pool of all the host's threads (--compress-threads; one thread took ~2 s a
# payload at this size). Every step's failure is reported and the table still runs; the script
# exits 1 at the end if any step failed. Everything is written as it goes to $OUT/progress.jsonl.
#
#   bash benchmarks/gpu_table.sh [--dry-run] [OUT]     # OUT defaults to benchmarks/gpu_table_out
set -euo pipefail
cd "$(dirname "$0")/.."
DRY=0
if [ "${1:-}" = "--dry-run" ]; then
    DRY=1
    shift
fi
OUT="${1:-benchmarks/gpu_table_out}"
PY="${PY:-.venv/bin/python}"
DATA="${DATA:-../shared/data/tinyshakespeare.txt}"
[ -f "$DATA" ] || DATA=""
mkdir -p "$OUT"
NCPU="$(nproc 2>/dev/null || echo 1)"
FAILED=()

step() { # NAME CMD...: run CMD; a failure is reported and recorded, never the end of the table
    local name="$1"
    shift
    echo "== $name"
    local rc=0
    "$@" || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "!! $name failed (exit $rc); the table goes on"
        FAILED+=("$name (exit $rc)")
    fi
}

if [ "$DRY" = 1 ]; then
    # every line below at a tiny size on the CPU: what CI runs so the script cannot rot
    DEVICE=cpu
    BUDGET=120
    TIMEOUT=300
    SIZE=(--model-size tiny --workers 2 --batch-size 2 --steps 20 --H 5 --seeds 0,1)
    SWEEP=(--ar-lrs 3e-3 --inner-lr 3e-3 --outer 0.7:0.9)
    CODECS="int4,chunk:8/4096+int2@1.0:0:0.95"
    TESTS=(--collect-only -q)
    SPEED=(--steps 10)
    echo "dry run: CPU, tiny sizes (the GPU run's lines, not its numbers)" | tee "$OUT/machine.txt"
else
    DEVICE=cuda
    BUDGET=420 # of the 540 s below: the estimate itself and the start-up fit in the rest
    TIMEOUT=540
    SIZE=(--model-size large --n-layer 8 --n-embd 512 --n-head 8 --workers 4 --batch-size 16
        --steps 1000 --H 20 --seeds 0,1,2)
    SWEEP=(--ar-lrs 1e-3,2e-3 --inner-lr 1e-3 --outer 0.7:0.9)
    CODECS="int4,chunk:64/4096+int2@1.0:0:0.95"
    TESTS=(-q -x)
    SPEED=(--steps 30)
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/machine.txt" || true
    if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
        echo "gpu_table.sh: torch sees no CUDA device on this machine: run it on a machine with" \
            "an NVIDIA GPU and its driver, or 'bash benchmarks/gpu_table.sh --dry-run' to check" \
            "the script on the CPU" >&2
        exit 2
    fi
    "$PY" -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))" |
        tee -a "$OUT/machine.txt"
fi
echo "$NCPU CPU threads" | tee -a "$OUT/machine.txt"

gpu_tests() { # the batched simulation equals the per-worker loop on this device too (seconds)
    LOCONET_TEST_DEVICE="$DEVICE" "$PY" -m pytest "${TESTS[@]}" tests/trainer/test_batched.py \
        2>&1 | tail -3
}
speed() {
    "$PY" benchmarks/batched_speed.py ${DATA:+"$DATA"} --device "$DEVICE" "${SPEED[@]}" 2>&1 |
        tee "$OUT/batched_speed.txt"
}
table() {
    timeout "$TIMEOUT" "$PY" benchmarks/diloco_seeds.py ${DATA:+--data "$DATA"} \
        --device "$DEVICE" "${SIZE[@]}" --warmup-frac 0.05 "${SWEEP[@]}" --codecs "$CODECS" \
        --jobs 1 --compress-threads "$NCPU" --budget-s "$BUDGET" \
        --out "$OUT" --results "$OUT/RESULTS_gpu.md" 2>&1 | tee "$OUT/run.log"
}
step "tests on $DEVICE" gpu_tests
step "batched speed on $DEVICE" speed
step "the table on $DEVICE" table

if [ "${#FAILED[@]}" -gt 0 ]; then
    printf 'FAILED: %s\n' "${FAILED[@]}"
    exit 1
fi
echo "done: $OUT/RESULTS_gpu.md"
