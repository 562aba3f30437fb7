"""shared_expert in Triton: out = (silu(x @ w13[:I]^T) * (x @ w13[I:]^T)) @ w2^T. TWO launches.

1. w13 + silu*mul: grid (I / BLOCK_N, SPLIT_K, M / BLOCK_M); each CTA loads its gate rows [n] and
   up rows [I + n] (so the epilogue has both halves). At K2 TP8, I = 256: I / 32 = 8 N-blocks, so
   SPLIT_K 8..16 is what fills 132 SMs. SPLIT_K > 1: fp32 partials go atomically into a workspace
   and the last-arriving CTA of each (N-block, M-block) reads them back with atomic_xchg(ws, 0)
   (re-zeroing it), applies silu*mul and writes h [M, I] bf16; no CTA waits on another.
2. w2: grid (K / BLOCK_N2, M / BLOCK_M), h [M, I] (tiny, L2) times w2 rows; no split needed
   (7168 / 32 = 224 CTAs).
REDUCE = "partials" (SPLIT_K > 1): each split stores its fp32 gate and up partials with plain stores into a
workspace [SPLIT_K, M, 2I] and the last arrival sums them in split order from L2 (.cg loads): deterministic, and
no per-element atomic on either side. Why: the router's epilogue read its logits with one acq_rel atomic_xchg per
element, as "atomic" does here, and plain L2 loads took it from 9.93 to 8.15 us at M = 1 (H200 tables ZC, ZD).
PDL = 1 (sm_90+, GPU only; BLOCK_K2 == I): w13 signals griddepcontrol.launch_dependents as it starts, w2 is a
programmatic dependent launch whose CTAs load their w2 rows (all I of them, one step) before griddepcontrol.wait,
which returns once w13 has completed and h is visible: w2's launch and its DRAM read overlap w13 (as
shared_expert_gemv.py does for M <= 4). w13 is launched plainly: a call never overlaps the previous call's w2.
The first value of each (atomic, 0) is the kernel as it was before either option existed.
"""

import math

import torch
import triton
import triton.language as tl

CONFIG_SPACE = {
    "BLOCK_M": [16, 32, 64],
    "BLOCK_N": [16, 32, 64],
    "BLOCK_K": [64, 128, 256],
    "SPLIT_K": [1, 2, 4, 8, 16],
    # 2 warps (num_warps, num_warps2), BLOCK_N2 16 and BLOCK_K2 64 went when REDUCE and PDL came, to keep the space
    # under the API's cap: no H200 or H100 table's winner (W-ZN, h100a-s23) used them
    "num_warps": [4, 8],
    "num_stages": [2, 3, 4],
    "BLOCK_N2": [32, 64, 128],
    "BLOCK_K2": [128, 256],
    "num_warps2": [4, 8],
    "num_stages2": [2, 3],
    "REDUCE": ["atomic", "partials"],
    "PDL": [0, 1],
}
CONSTRAINTS = [
    "BLOCK_M <= max(16, M)",
    "BLOCK_N <= I",
    "BLOCK_K * SPLIT_K <= K",
    "BLOCK_K2 <= I",
    "BLOCK_N * BLOCK_K <= 16384",
    "BLOCK_N2 * BLOCK_K2 <= 16384",
    "PDL == 0 or BLOCK_K2 == I",  # the prefetched w2 tile is the CTA's whole share
]
DEFAULT_CONFIG = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 8, "num_warps": 4, "num_stages": 3,
                  "BLOCK_N2": 32, "BLOCK_K2": 128, "num_warps2": 4, "num_stages2": 2, "REDUCE": "atomic", "PDL": 0}


def claims(config, shape):
    """Tensor-core tiles streamed through shared memory; griddepcontrol with PDL."""
    out = ["mma.sync", "cp.async"]
    if int(_full_config(config)["PDL"]):
        out += ["griddepcontrol.launch_dependents", "griddepcontrol.wait"]
    return {"ptx_contains": out}


USES_LIBRARY = False


@triton.jit
def shared_w13_kernel(x_ptr, w13_ptr, h_ptr, ws_ptr, cnt_ptr, M, stride_xm,
                      K: tl.constexpr, I: tl.constexpr, K_SPLIT: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
                      PARTIALS: tl.constexpr, PDL: tl.constexpr, INTERPRET: tl.constexpr):
    if PDL:  # w2's CTAs may start (and load their w2 rows) once all of these have started
        tl.extra.cuda.gdc_launch_dependents()
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < I
    acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kk in range(0, K_SPLIT, BLOCK_K):
        offs_k = pid_k * K_SPLIT + kk + tl.arange(0, BLOCK_K)
        k_ok = offs_k < K
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        wm = n_ok[:, None] & k_ok[None, :]
        bg = tl.load(w13_ptr + offs_n[:, None] * K + offs_k[None, :], mask=wm, other=0.0)
        bu = tl.load(w13_ptr + (I + offs_n)[:, None] * K + offs_k[None, :], mask=wm, other=0.0)
        if INTERPRET:
            af = a.to(tl.float32)
            acc_g += tl.dot(af, tl.trans(bg.to(tl.float32)))
            acc_u += tl.dot(af, tl.trans(bu.to(tl.float32)))
        else:
            acc_g += tl.dot(a, tl.trans(bg))
            acc_u += tl.dot(a, tl.trans(bu))
    omask = m_ok[:, None] & n_ok[None, :]
    hp = h_ptr + offs_m[:, None] * I + offs_n[None, :]
    if SPLIT_K == 1:
        hv = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
        tl.store(hp, hv.to(h_ptr.dtype.element_ty), mask=omask)
    else:
        wsp = ws_ptr + offs_m[:, None] * (2 * I) + offs_n[None, :]
        if PARTIALS:  # this split's own [M, 2I] slice, plain stores
            tl.store(wsp + pid_k * M * 2 * I, acc_g, mask=omask)
            tl.store(wsp + pid_k * M * 2 * I + I, acc_u, mask=omask)
        else:  # one shared slice, summed into atomically
            tl.atomic_add(wsp, acc_g, mask=omask, sem="relaxed", scope="gpu")
            tl.atomic_add(wsp + I, acc_u, mask=omask, sem="relaxed", scope="gpu")
        # all threads' stores, a CTA barrier, then the gpu-scope release of the counter
        tl.debug_barrier()
        cptr = cnt_ptr + pid_m * tl.num_programs(0) + pid_n
        arrived = tl.atomic_add(cptr, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            # the last split of this tile: the acquire made the others' sums visible
            if PARTIALS:  # read from L2 (.cg) and summed in split order: nothing to re-zero
                gv = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                uv = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                for s in tl.static_range(SPLIT_K):
                    gv += tl.load(wsp + s * M * 2 * I, mask=omask, other=0.0, cache_modifier=".cg")
                    uv += tl.load(wsp + s * M * 2 * I + I, mask=omask, other=0.0, cache_modifier=".cg")
            elif INTERPRET:
                zero = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                gv = tl.load(wsp, mask=omask, other=0.0)
                uv = tl.load(wsp + I, mask=omask, other=0.0)
                tl.store(wsp, zero, mask=omask)
                tl.store(wsp + I, zero, mask=omask)
            else:  # read back and re-zeroed for the next call, one atomic per element
                zero = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                gv = tl.atomic_xchg(wsp, zero, mask=omask, sem="acq_rel", scope="gpu")
                uv = tl.atomic_xchg(wsp + I, zero, mask=omask, sem="acq_rel", scope="gpu")
            hv = gv / (1.0 + tl.exp(-gv)) * uv
            tl.store(hp, hv.to(h_ptr.dtype.element_ty), mask=omask)
            tl.atomic_xchg(cptr, 0, sem="relaxed", scope="gpu")


@triton.jit
def shared_w2_kernel(h_ptr, w2_ptr, out_ptr, M, stride_om,
                     K: tl.constexpr, I: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, PDL: tl.constexpr, INTERPRET: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < K
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if PDL:
        # w2 does not depend on w13: load the CTA's rows (BLOCK_K == I: one step), then wait for h
        offs_k = tl.arange(0, BLOCK_K)
        b = tl.load(w2_ptr + offs_n[:, None] * I + offs_k[None, :], mask=n_ok[:, None], other=0.0)
        tl.extra.cuda.gdc_wait()
        a = tl.load(h_ptr + offs_m[:, None] * I + offs_k[None, :], mask=m_ok[:, None], other=0.0)
        acc += tl.dot(a, tl.trans(b))
    else:
        for k0 in range(0, I, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            k_ok = offs_k < I
            a = tl.load(h_ptr + offs_m[:, None] * I + offs_k[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(w2_ptr + offs_n[:, None] * I + offs_k[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            if INTERPRET:
                acc += tl.dot(a.to(tl.float32), tl.trans(b.to(tl.float32)))
            else:
                acc += tl.dot(a, tl.trans(b))
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


def _np2(n):
    return 1 << max(0, (int(n) - 1).bit_length())


def _full_config(config):
    cfg = dict(DEFAULT_CONFIG)
    cfg.update(config or {})
    return cfg


def _consts(cfg, shape, interpret, cap=90):
    K, I = int(shape["K"]), int(shape["I"])
    bk = int(cfg["BLOCK_K"])
    k_split = triton.cdiv(triton.cdiv(K, int(cfg["SPLIT_K"])), bk) * bk
    split = triton.cdiv(K, k_split)
    bm = int(cfg["BLOCK_M"])
    # griddepcontrol is PTX for sm_90+: the interpreter (CPU) runs the plain pair, same results
    pdl = bool(int(cfg["PDL"])) and not interpret and cap >= 90
    w13 = dict(K=K, I=I, K_SPLIT=k_split, BLOCK_M=bm, BLOCK_N=int(cfg["BLOCK_N"]), BLOCK_K=bk, SPLIT_K=split,
               PARTIALS=cfg["REDUCE"] == "partials", PDL=pdl, INTERPRET=interpret)
    w2 = dict(K=K, I=I, BLOCK_M=bm, BLOCK_N=int(cfg["BLOCK_N2"]), BLOCK_K=min(int(cfg["BLOCK_K2"]), _np2(I)),
              PDL=pdl, INTERPRET=interpret)
    return w13, w2


def build(config, shape):
    cfg = _full_config(config)
    M = max(1, int(shape["M"]))
    state = {}

    def run(x, w13, w2, out):
        interpret = x.device.type == "cpu"
        key = (x.device, interpret)
        st = state.get(key)
        if st is None:
            cap = 0 if interpret else torch.cuda.get_device_capability(x.device)[0] * 10
            c13, c2 = _consts(cfg, shape, interpret, cap)
            nb1 = triton.cdiv(c13["I"], c13["BLOCK_N"])
            mb = triton.cdiv(M, c13["BLOCK_M"])
            st = state[key] = {"w13": c13, "w2": c2,
                               "h": torch.zeros((M, c13["I"]), device=x.device, dtype=torch.bfloat16),
                               # "partials": one [M, 2I] slice per split; "atomic": one slice, kept zeroed
                               "ws": torch.zeros((M * 2 * c13["I"] * (c13["SPLIT_K"] if c13["PARTIALS"] else 1)
                                                  if c13["SPLIT_K"] > 1 else 1,), device=x.device,
                                                 dtype=torch.float32),
                               "cnt": torch.zeros((nb1 * mb,), device=x.device, dtype=torch.int32)}
        c13, c2 = st["w13"], st["w2"]
        m = x.shape[0]
        if m > M:
            raise ValueError(f"built for M={M}, called with {m} tokens")
        mb = triton.cdiv(m, c13["BLOCK_M"])
        shared_w13_kernel[(triton.cdiv(c13["I"], c13["BLOCK_N"]), c13["SPLIT_K"], mb)](
            x, w13, st["h"], st["ws"], st["cnt"], m, x.stride(0),
            num_warps=int(cfg["num_warps"]), num_stages=int(cfg["num_stages"]), **c13)
        shared_w2_kernel[(triton.cdiv(c2["K"], c2["BLOCK_N"]), mb)](
            st["h"], w2, out, m, out.stride(0), num_warps=int(cfg["num_warps2"]), num_stages=int(cfg["num_stages2"]),
            **c2, **({"launch_pdl": True} if c2["PDL"] else {}))

    return run


# --- ahead-of-time PTX, no GPU -----------------------------------------------------------------

def _arch_cap(arch) -> int:
    """90 for "sm_90a": the compute capability an arch string names."""
    return int("".join(ch for ch in str(arch) if ch.isdigit()) or 90)


def _aot(kernel, types, consts, num_warps, num_stages, arch, aligned=(), launch_pdl=False):
    """PTX for one kernel, specialised as the JIT would at run time: pointers (torch allocations)
    and the ints in ``aligned`` (strides that are multiples of 16) carry tt.divisibility=16."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    cap = _arch_cap(arch)
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
                         options={"num_warps": num_warps, "num_stages": num_stages,
                                  **({"launch_pdl": True} if launch_pdl else {})})
    return out.asm["ptx"]


def compile_ptx(config, shape, arch="sm_90a"):
    cfg = _full_config(config)
    c13, c2 = _consts(cfg, shape, False, _arch_cap(arch))
    types = {"x_ptr": "*bf16", "w13_ptr": "*bf16", "h_ptr": "*bf16", "ws_ptr": "*fp32", "cnt_ptr": "*i32",
             "w2_ptr": "*bf16", "out_ptr": "*bf16", "M": "i32", "stride_xm": "i32", "stride_om": "i32"}
    al = ("stride_xm", "stride_om")
    return (_aot(shared_w13_kernel, types, c13, int(cfg["num_warps"]), int(cfg["num_stages"]), arch, al) + "\n" +
            _aot(shared_w2_kernel, types, c2, int(cfg["num_warps2"]), int(cfg["num_stages2"]), arch, al,
                 launch_pdl=c2["PDL"]))
