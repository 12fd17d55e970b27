#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine (an H200 is the target; < 8 minutes with 16 cores):
#   1. configure + build vitpe, the `vitpe` command and test_cuda for sm_90 (-j16),
#   2. run test_cuda (every CUDA op and attention variant against the CPU references),
#   3. `vitpe bench attention --device cuda` (ViT-B/16 relbias, Swin-T shifted windows, each
#      in-kernel vs a dense bias),
#   4. where `import torch` works with CUDA: PyTorch SDPA with the same additive bias in bf16,
#      side by side with ratios (tests/cuda/torch_attention_bench.py),
#   5. end-to-end models: `vitpe bench --model M --device cuda --precision bf16 --batch 1,64,256`
#      for ViT-S/16, ViT-B/16 and Swin-T (random weights), one table of images/s, and ViT-B/16's
#      batch-256 throughput as a fraction of the H200's dense bf16 peak (989 TFLOP/s, with the
#      model's own flops_per_image).
# Usage: tests/cuda/device_check.sh            (from anywhere; the repository is found from here)
# Knobs: BUILD_DIR (default <repo>/build-device), JOBS (16), CUDA_ARCH (90), OUT (where logs and
# JSON go; default $BUILD_DIR/device_check). Every step runs even when an earlier one fails; the
# exit status is non-zero when the build or a test failed.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-device}
JOBS=${JOBS:-16}
CUDA_ARCH=${CUDA_ARCH:-90}
OUT=${OUT:-$BUILD_DIR/device_check}
mkdir -p "$OUT"
VITPE="$BUILD_DIR/vitpe"
status=0
T0=$(date +%s)

step() { printf '\n==== %s  (+%ss)\n' "$*" "$(( $(date +%s) - T0 ))"; }

step "machine"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader ||
    echo "nvidia-smi failed"
else
  echo "nvidia-smi not found: no NVIDIA driver here (GPU steps will skip with a message)"
fi
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
nvcc --version | tail -1

step "configure (CUDA ON, sm_$CUDA_ARCH)"
if ! cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DVITPE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DVITPE_BUILD_TESTS=ON >"$OUT/configure.log" 2>&1; then
  tail -30 "$OUT/configure.log"
  echo "FAILED: configure"
  exit 1
fi
echo "ok (log: $OUT/configure.log)"

step "build vitpe_cli test_cuda (-j$JOBS)"
if ! timeout 420 cmake --build "$BUILD_DIR" --target vitpe_cli test_cuda -j"$JOBS" \
    >"$OUT/build.log" 2>&1; then
  grep -E "error|Error" "$OUT/build.log" | head -40
  echo "FAILED: build (log: $OUT/build.log)"
  exit 1
fi
echo "ok (log: $OUT/build.log)"

step "test_cuda"
if timeout 300 "$BUILD_DIR/tests/test_cuda" --gtest_color=no >"$OUT/test_cuda.log" 2>&1; then
  grep -E "^\[==========\] [0-9]+ tests|^\[  PASSED  \]|^\[  SKIPPED \] [0-9]+ test" \
    "$OUT/test_cuda.log"
  grep -m1 "no CUDA device" "$OUT/test_cuda.log"
else
  grep -E "FAILED|Failure|error|Expected|Which is|rel|err" "$OUT/test_cuda.log" | head -60
  echo "FAILED: test_cuda (log: $OUT/test_cuda.log)"
  status=1
fi

step "vitpe bench attention --device cuda"
rm -f "$OUT/vitpe_attention.json"
timeout 180 "$VITPE" bench attention --device cuda --json "$OUT/vitpe_attention.json" 2>&1 |
  tee "$OUT/bench_attention.log"

step "PyTorch SDPA with the same additive bias (bf16)"
PY=""
for candidate in python3 /usr/bin/python3; do
  if "$candidate" -c "import torch" >/dev/null 2>&1; then PY=$candidate; break; fi
done
if [ -n "$PY" ]; then
  args=(--models)
  [ -f "$OUT/vitpe_attention.json" ] && args+=(--vitpe-json "$OUT/vitpe_attention.json")
  timeout 180 "$PY" "$ROOT/tests/cuda/torch_attention_bench.py" "${args[@]}" 2>&1 |
    tee "$OUT/torch_attention.log"
else
  echo "no python3 here can import torch: PyTorch comparison skipped"
fi

# ==== END-TO-END MODELS ========================================================================
step "end-to-end models on the GPU (bf16, batch 1/64/256)"
E2E_MODELS="vit_small_patch16_224 vit_base_patch16_224 swin_tiny_patch4_window7_224"
for model in $E2E_MODELS; do
  if ! timeout 150 "$VITPE" bench --model "$model" --device cuda --precision bf16 \
      --batch 1,64,256 --json >"$OUT/bench_$model.json" 2>"$OUT/bench_$model.err"; then
    echo "FAILED: bench --model $model --device cuda:"
    tail -5 "$OUT/bench_$model.err"
    status=1
  fi
done
# One table (images/s per batch; the logits' bf16 error against the GPU's f32 path), and ViT-B/16
# at batch 256 against the peak.
python3 - "$OUT" $E2E_MODELS <<'PY' || echo "no table: python3 failed (the JSON is in $OUT)"
import json, sys
out, models = sys.argv[1], sys.argv[2:]
PEAK = 989e12  # H200 dense bf16 tensor-core peak, FLOP/s
print(f"{'model':32} {'batch':>5} {'ms':>9} {'images/s':>10} {'TFLOP/s':>8} {'bf16 err':>9}")
for m in models:
    try:
        with open(f"{out}/bench_{m}.json") as f:
            j = json.load(f)
    except (OSError, ValueError):
        print(f"{m:32} (no result)")
        continue
    for r in j["results"]:
        print(f"{m:32} {r['batch']:5d} {r['median_ms']:9.2f} {r['img_per_s']:10.1f} "
              f"{r['tflops_per_s']:8.1f} {r.get('max_rel_logit_error', float('nan')):9.1e}")
        if m == "vit_base_patch16_224" and r["batch"] == 256:
            frac = r["img_per_s"] * j["flops_per_image"] / PEAK
            vitb = (r["img_per_s"], j["flops_per_image"], frac)
if "vitb" in dir():
    print(f"ViT-B/16 bf16 batch 256: {vitb[0]:.0f} images/s x {vitb[1] / 1e9:.2f} GFLOP/image = "
          f"{vitb[0] * vitb[1] / 1e12:.0f} TFLOP/s, {100 * vitb[2]:.1f} % of the H200's 989 TFLOP/s "
          f"dense bf16 peak")
PY
# ===============================================================================================

step "done: status $status (logs in $OUT)"
exit $status
