#!/usr/bin/env bash
# Kernel checks for a machine with a CUDA GPU: the tests at real sizes and at odd shapes on the GPU, then the
# benchmark table for BENCHMARKS.md. Needs a CUDA build of torch and Triton.
#   scripts/gpu_check.sh                 # tests, then `python -m kernels.bench` (bf16, with torch.compile)
#   scripts/gpu_check.sh --no-compile    # arguments go to kernels.bench
#   PYTHON=python3 scripts/gpu_check.sh  # another interpreter than .venv/bin/python
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}

"$PYTHON" - <<'PY'
import torch, triton
assert torch.cuda.is_available(), f"torch {torch.__version__} sees no CUDA GPU"
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
PY
"$PYTHON" -m pytest -q -p no:cacheprovider \
    tests/gpu/test_kernels_cuda.py tests/unit/test_kernels.py tests/unit/test_kernels_dispatch.py
date -u +"%Y-%m-%d %H:%M UTC"
"$PYTHON" -m kernels.bench "$@"
# the embedded brain (SmolLM2 + Parley's adapter) on the GPU: block diffusion against autoregressive decoding
# and callers at once, their passes shared (llm.blockdiff.PassBatcher), against one after another
"$PYTHON" -m app.cli llm bench --model llm/weights/parley-smollm2 --device cuda --repeats 5 \
    --system "You answer phone calls for Maple Street Hair Studio." --prompt "Hi, what are your hours on Saturday?" \
    --callers 1,4,16
