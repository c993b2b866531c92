#!/bin/bash
# The `next` branch on the H200: its GPU tests, then one bench A/B of the three switches
# (METRALE_TILE_A4_FMA, METRALE_GEMM_DUAL, METRALE_NVFP4_TILE_MIN_ROWS), each a process of its own.
export PYTHONPATH=. METRALE_REQUIRE_GPU=1
mkdir -p $OUT
T0=$(date +%s)
timeout 300 python -m pytest -q -n 8 -p no:benchmark -p no:cacheprovider -rfE \
  tests/gpu/test_cuda_nvfp4_tile.py tests/gpu/test_cuda_all_rows.py tests/gpu/test_cuda_layer.py \
  tests/gpu/test_cuda_q2_0.py tests/gpu/test_cuda_pdl.py tests/gpu/test_cuda_nvfp4_mma.py \
  > $OUT/tests_gpu.log 2>&1; echo "gpu tests rc=$? $(( $(date +%s)-T0 ))s"; tail -3 $OUT/tests_gpu.log
timeout 150 python -m pytest -q -n 8 -p no:benchmark -p no:cacheprovider -rfE -k cuda tests/test_vectors.py \
  > $OUT/tests_vectors.log 2>&1; echo "vectors rc=$? $(( $(date +%s)-T0 ))s"; tail -3 $OUT/tests_vectors.log
B="python -m metrale.bench --shape qwen3-8b --formats nvfp4,w4a4,q2_0 --peers bf16 --kernels none --cell-seconds 1 --samples 5"
timeout 200 $B --m 8,12,16,20,24,32,48,64,128,256,1024,4096 --deadline 150 --json $OUT/a_default.json > $OUT/a.log 2>&1
echo "A rc=$? $(( $(date +%s)-T0 ))s"
METRALE_TILE_A4_FMA=0 METRALE_GEMM_DUAL=0 timeout 120 $B --m 32,64,256,1024,4096 --deadline 80 --json $OUT/b_nofma_nodual.json > $OUT/b.log 2>&1
echo "B rc=$? $(( $(date +%s)-T0 ))s"
METRALE_NVFP4_TILE_MIN_ROWS=9 timeout 80 $B --m 12,16,20,24 --deadline 50 --json $OUT/c_tile9.json > $OUT/c.log 2>&1
echo "C rc=$? $(( $(date +%s)-T0 ))s"
python - <<'PY'
import json, os
o = os.environ["OUT"]
def load(n):
    try: d = json.load(open(f"{o}/{n}"))["shapes"]["qwen3-8b"]
    except Exception: return {}
    r = {("bf16", int(m)): (t["us"], None) for m, t in d["peers"].get("bf16", {}).get("times", {}).items()}
    for f, x in d["formats"].items():
        for m, c in x["rows"].items():
            r[(f, int(m))] = (c.get("us"), c.get("exact"), " ".join(sorted(set(c.get("launches", [])))))
    return r
a, b, c = load("a_default.json"), load("b_nofma_nodual.json"), load("c_tile9.json")
for k in sorted(set(a) | set(b) | set(c), key=lambda k: (k[0], k[1])):
    print(k, a.get(k), b.get(k, ("",))[:2], c.get(k))
PY
