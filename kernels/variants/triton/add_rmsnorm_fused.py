"""add_rmsnorm in Triton: residual_out = x + residual (bf16); out = rmsnorm(residual_out) * weight.

ONE launch, one CTA per row. When BLOCK_H >= H the row stays in registers (one read of x and
residual, one write of each output: the HBM floor). Otherwise pass 1 streams the row in BLOCK_H
chunks (store residual_out, accumulate the fp32 sum of squares of the bf16-rounded sum) and pass 2
recomputes x + residual (an L2 hit) to write out. The statistics use the bf16-rounded residual,
as vLLM's fused_add_rms_norm does; all maths in fp32.
"""

import math
import os

import torch
import triton
import triton.language as tl

CONFIG_SPACE = {
    "BLOCK_H": [1024, 2048, 4096, 8192],
    "num_warps": [4, 8, 16],
}
CONSTRAINTS = ["BLOCK_H <= 2 * H", "BLOCK_H // (32 * num_warps) <= 64"]
DEFAULT_CONFIG = {"BLOCK_H": 8192, "num_warps": 16}
CLAIMS = {"ptx_contains": ["ld.global.v4.b32", "st.global.v4.b32"]}
USES_LIBRARY = False


@triton.jit
def add_rmsnorm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr,
                       stride_x, stride_r, stride_o, stride_ro, eps,
                       H: tl.constexpr, BLOCK_H: tl.constexpr, ONE_PASS: tl.constexpr, TRIGGER: tl.constexpr):
    if TRIGGER:  # the head of a chain (build's pdl): the next kernel may launch and prefetch its weights now
        tl.extra.cuda.gdc_launch_dependents()
    row = tl.program_id(0).to(tl.int64)
    if ONE_PASS:
        offs = tl.arange(0, BLOCK_H)
        ok = offs < H
        x = tl.load(x_ptr + row * stride_x + offs, mask=ok, other=0.0).to(tl.float32)
        r = tl.load(res_ptr + row * stride_r + offs, mask=ok, other=0.0).to(tl.float32)
        s = (x + r).to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_ro + offs, s, mask=ok)
        sf = s.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(sf * sf, axis=0) / H + eps)
        w = tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * stride_o + offs, (sf * rstd * w).to(out_ptr.dtype.element_ty), mask=ok)
    else:
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
        for h0 in range(0, H, BLOCK_H):
            offs = h0 + tl.arange(0, BLOCK_H)
            ok = offs < H
            x = tl.load(x_ptr + row * stride_x + offs, mask=ok, other=0.0).to(tl.float32)
            r = tl.load(res_ptr + row * stride_r + offs, mask=ok, other=0.0).to(tl.float32)
            s = (x + r).to(res_out_ptr.dtype.element_ty)
            tl.store(res_out_ptr + row * stride_ro + offs, s, mask=ok)
            sf = s.to(tl.float32)
            acc += sf * sf
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / H + eps)
        for h0 in range(0, H, BLOCK_H):
            offs = h0 + tl.arange(0, BLOCK_H)
            ok = offs < H
            x = tl.load(x_ptr + row * stride_x + offs, mask=ok, other=0.0).to(tl.float32)
            r = tl.load(res_ptr + row * stride_r + offs, mask=ok, other=0.0).to(tl.float32)
            sf = (x + r).to(res_out_ptr.dtype.element_ty).to(tl.float32)
            w = tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
            tl.store(out_ptr + row * stride_o + offs, (sf * rstd * w).to(out_ptr.dtype.element_ty), mask=ok)


def _full_config(config):
    cfg = dict(DEFAULT_CONFIG)
    cfg.update(config or {})
    return cfg


def _consts(cfg, shape, trigger=False):
    H = int(shape["H"])
    bh = int(cfg["BLOCK_H"])
    return dict(H=H, BLOCK_H=bh, ONE_PASS=bh >= H, TRIGGER=trigger)


def build(config, shape, pdl=False):
    """pdl: the head of a layer's chain of kernels (not a tuning parameter): launched plainly, it lets the next
    kernel, a programmatic dependent launch, start at once (griddepcontrol.launch_dependents). sm_90+ GPUs only."""
    cfg = _full_config(config)
    pdl = pdl and os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available() \
        and torch.cuda.get_device_capability()[0] >= 9
    consts = _consts(cfg, shape, pdl)
    eps = float(shape.get("eps", 1e-6))
    nw = int(cfg["num_warps"])

    def run(x, residual, weight, out, residual_out):
        m = x.shape[0]
        if m == 0:
            return
        add_rmsnorm_kernel[(m,)](x, residual, weight, out, residual_out,
                                 x.stride(0), residual.stride(0), out.stride(0), residual_out.stride(0),
                                 eps, num_warps=nw, **consts)

    return run


# --- ahead-of-time PTX, no GPU -----------------------------------------------------------------

def _aot(kernel, types, consts, num_warps, num_stages, arch, aligned=()):
    """PTX for one kernel, specialised as the JIT would at run time: pointers (torch allocations)
    and the ints in ``aligned`` (strides that are multiples of 16) carry tt.divisibility=16."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    cap = int("".join(ch for ch in str(arch) if ch.isdigit()) or 90)
    sig, attrs = {}, {}
    for i, name in enumerate(kernel.arg_names):
        if name in consts:
            sig[name] = "constexpr"
            continue
        sig[name] = types[name]
        if types[name].startswith("*") or name in aligned:
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(kernel, sig, consts, attrs)
    out = triton.compile(src, target=GPUTarget("cuda", cap, 32),
                         options={"num_warps": num_warps, "num_stages": num_stages})
    return out.asm["ptx"]


def compile_ptx(config, shape, arch="sm_90a", pdl=False):
    cfg = _full_config(config)
    types = {"x_ptr": "*bf16", "res_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*bf16", "res_out_ptr": "*bf16",
             "stride_x": "i32", "stride_r": "i32", "stride_o": "i32", "stride_ro": "i32", "eps": "fp32"}
    return _aot(add_rmsnorm_kernel, types, _consts(cfg, shape, pdl), int(cfg["num_warps"]), 1, arch,
                aligned=("stride_x", "stride_r", "stride_o", "stride_ro"))
