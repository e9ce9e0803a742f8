"""Every kernel compiles for a Hopper GPU (sm_90) with no GPU present: Triton's bundled ptxas, no launch.

The interpreter is lenient about things only the compiler checks (types, layouts, shared memory), so this
catches GPU-only breakage on CPU CI, and checks what the speed rests on: 16-byte vector loads, no register
spills, shared memory within the H200's 227 KB, wgmma tensor-core ops for 64-query tiles. Integer arguments
are marked divisible by 16, as Triton's launcher marks them at LLaDA-8B sizes.
"""
import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BF16, F32 = "*bf16", "*fp32"
ATTENTION_TYPES = {"q_ptr": BF16, "k_ptr": BF16, "v_ptr": BF16, "mask_ptr": "*u8", "out_ptr": BF16,
                   "part_o_ptr": F32, "part_ml_ptr": F32, "scale_log2": "fp32"}
ATTENTION_CONSTS = {"HAS_MASK": True, "INPUT_PRECISION": None, "BLOCK_N": 64, "BLOCK_D": 128}
# (label, module, kernel, argument types, constexprs, options); unlisted arguments are i32 divisible by 16
BUILDS = [
    ("rms_norm", "rms_norm", "_rms_norm_kernel", {"x_ptr": BF16, "w_ptr": BF16, "out_ptr": BF16, "eps": "fp32"},
     {"BLOCK_N": 4096}, {"num_warps": 8}),
    ("rope", "rope", "_rope_kernel", {"x_ptr": BF16, "cos_ptr": F32, "sin_ptr": F32, "out_ptr": BF16},
     {"BLOCK_T": 32, "BLOCK_HALF": 64}, {}),
    ("swiglu", "swiglu", "_swiglu_kernel", {"gate_ptr": BF16, "up_ptr": BF16, "out_ptr": BF16},
     {"BLOCK_N": 1024}, {"num_warps": 4}),
    ("confidence_argmax", "confidence_argmax", "_confidence_argmax_kernel",
     {"logits_ptr": BF16, "token_ptr": "*i64", "conf_ptr": F32, "part_max_ptr": F32, "part_sum_ptr": F32,
      "part_arg_ptr": "*i32"}, {"HAS_MASK": True, "SPLIT": True, "BLOCK_V": 2048}, {"num_warps": 8}),
    ("confidence_argmax_combine", "confidence_argmax", "_confidence_argmax_combine_kernel",
     {"part_max_ptr": F32, "part_sum_ptr": F32, "part_arg_ptr": "*i32", "token_ptr": "*i64", "conf_ptr": F32},
     {"BLOCK_S": 16}, {}),
    ("attention_block32_split", "attention", "_attention_kernel", ATTENTION_TYPES,
     {**ATTENTION_CONSTS, "SPLIT": True, "BLOCK_M": 32}, {"num_warps": 4, "num_stages": 3}),
    ("attention_block64", "attention", "_attention_kernel", ATTENTION_TYPES,
     {**ATTENTION_CONSTS, "SPLIT": False, "BLOCK_M": 64}, {"num_warps": 4, "num_stages": 3}),
    ("attention_combine", "attention", "_attention_combine_kernel",
     {"part_o_ptr": F32, "part_ml_ptr": F32, "out_ptr": BF16}, {"BLOCK_M": 32, "BLOCK_D": 128}, {}),
]
H200_SHARED_BYTES = 227 * 1024


def _compile_all() -> dict:
    """Compile BUILDS for sm_90; per label: registers, stack and local bytes, shared bytes, PTX features."""
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    report = {}
    for label, module, name, types, consts, options in BUILDS:
        fn = getattr(importlib.import_module(f"kernels.{module}"), name)
        signature = {a: "constexpr" if a in consts else types.get(a, "i32") for a in fn.arg_names}
        attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
                 if signature[a] not in ("constexpr", "fp32")}
        compiled = triton.compile(ASTSource(fn, signature, consts, attrs), target=GPUTarget("cuda", 90, 32),
                                  options=options)
        cubin = os.path.join(os.environ["OUT_DIR"], f"{label}.cubin")
        with open(cubin, "wb") as f:
            f.write(compiled.asm["cubin"])
        usage = subprocess.run([cuobjdump, "--dump-resource-usage", cubin], capture_output=True, text=True).stdout
        ptx = compiled.asm["ptx"]
        report[label] = {**{k.lower(): int(v) for k, v in re.findall(r"(REG|STACK|LOCAL):(\d+)", usage)},
                         "shared": compiled.metadata.shared, "v4_loads": "ld.global.v4" in ptx,
                         "wgmma": "wgmma" in ptx}
    return report


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    try:
        import triton
    except ImportError:
        pytest.skip("Triton is not installed")
    if not os.path.exists(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")):
        pytest.skip("this Triton has no bundled ptxas")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # real JIT functions, not interpreted
    env.update(OUT_DIR=str(tmp_path_factory.mktemp("cubin")), PYTHONPATH=REPO, TRITON_DEFAULT_FP_FUSION="1")
    done = subprocess.run([sys.executable, __file__], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_every_kernel_compiles_without_spills(report):
    assert sorted(report) == sorted(label for label, *_ in BUILDS)
    for label, usage in report.items():
        assert usage["stack"] == 0 and usage["local"] == 0, f"{label} spills registers: {usage}"
        assert usage["shared"] <= H200_SHARED_BYTES, f"{label} needs too much shared memory: {usage}"


@pytest.mark.parametrize("label", ["rms_norm", "rope", "swiglu", "confidence_argmax", "attention_block64"])
def test_streaming_loads_are_16_bytes_wide(report, label):
    assert report[label]["v4_loads"], report[label]


def test_64_query_tiles_use_hopper_tensor_cores(report):
    assert report["attention_block64"]["wgmma"], report["attention_block64"]


if __name__ == "__main__":
    print(json.dumps(_compile_all()))
