"""Slot semantics the package needs without kerneltune: inputs, references, stock fallbacks, checks.

Copied from kerneltune's kernels/slots/*.py (the exporter's tests compare both on the same inputs),
because the package must re-check its kernels on a machine where kerneltune is not installed.
Calling convention: ``fn(**inputs, **outputs)``; the callable writes every element of the outputs.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

KernelFn = Callable[..., None]
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
REL_L2_TOL = {torch.bfloat16: 1e-2, torch.float16: 5e-3, torch.float32: 1e-4}
_MOE_ACT_SEED_OFFSET = 0x9E3779B9
ROUTER_SCORE_DELTA_SIGMOID = 1e-3
ROUTER_SCORE_DELTA_SOFTMAX_REL = 2.0 ** -5
ROUTER_WEIGHT_RTOL = {"sigmoid": 1e-2, "softmax": 2e-2}


# --- shared helpers -------------------------------------------------------------------------------

def ref_dtype(device: torch.device) -> torch.dtype:
    return torch.float64 if device.type == "cpu" else torch.float32


DEVICE_DRAW_MIN = 1 << 20  # elements: kerneltune's kernels/slots/base.py rule, so a seed gives the same inputs


def _draws_on_device(device: torch.device, numel: int) -> bool:
    return device.type != "cpu" and numel >= DEVICE_DRAW_MIN


def _randn(shape: tuple[int, ...], g: torch.Generator, device: torch.device, dtype: torch.dtype,
           std: float = 1.0) -> torch.Tensor:
    if not _draws_on_device(device, math.prod(shape)):
        return (torch.randn(shape, generator=g, dtype=torch.float32) * std).to(device=device, dtype=dtype)
    # Large tensors (the experts' weights: 2 billion values at K2's shape) are drawn on the device, seeded from the
    # host generator: drawn on the host they took about 15 s each, and a self-test entry draws three sets per M.
    dev_gen = torch.Generator(device=device)
    dev_gen.manual_seed(int(torch.randint(0, 2**62, (1,), generator=g)))
    return (torch.randn(shape, generator=dev_gen, device=device, dtype=torch.float32) * std).to(dtype)


def _weight(shape: tuple[int, ...], fan_in: int, g: torch.Generator, device: torch.device,
            dtype: torch.dtype) -> torch.Tensor:
    return _randn(shape, g, device, dtype, std=1.0 / math.sqrt(fan_in))


def _norm_weight(n: int, g: torch.Generator, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return (0.5 + torch.rand((n,), generator=g, dtype=torch.float32)).to(device=device, dtype=dtype)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.to(x.dtype)


def _rms_norm_native(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return (x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)).to(weight.dtype) * weight


def _silu_mul(h: torch.Tensor) -> torch.Tensor:
    i = h.shape[-1] // 2
    return torch.nn.functional.silu(h[..., :i]) * h[..., i:]


def _swiglu_ref(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return _silu_mul(x @ w13.to(x.dtype).t()) @ w2.to(x.dtype).t()


def compare_dense(name: str, out: torch.Tensor, ref: torch.Tensor, rel_l2_tol: float) -> tuple[bool, str, float | None]:
    """(passed, reason, rel_l2): no NaN/Inf (poisoned outputs left unwritten stay NaN), rel-L2 bound."""
    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if o.shape != r.shape:
        return False, f"{name}: shape {tuple(o.shape)} != expected {tuple(r.shape)}", None
    bad = ~torch.isfinite(o)
    if bad.any():
        return False, f"{name}: {int(bad.sum())} of {o.numel()} elements NaN/Inf (unwritten or overflowed)", None
    rel = (o - r).norm().item() / max(r.norm().item(), 1e-30)
    if rel > rel_l2_tol:
        return False, f"{name}: relative L2 error {rel:.3e} > {rel_l2_tol:.0e}", rel
    return True, "", rel


@dataclass(frozen=True)
class SlotSemantics:
    make_inputs: Callable[[dict[str, Any], torch.dtype, int, int, torch.device], dict[str, torch.Tensor]]
    alloc_outputs: Callable[[dict[str, Any], torch.dtype, int, torch.device], dict[str, torch.Tensor]]
    reference: Callable[[dict[str, Any], dict[str, torch.Tensor]], dict[str, torch.Tensor]]
    stock: Callable[[dict[str, Any]], KernelFn]
    check: Callable[[dict[str, Any], torch.dtype, dict[str, torch.Tensor], dict[str, torch.Tensor]], tuple[bool, str, float | None]]


def _check_all(names: tuple[str, ...]) -> Callable[..., tuple[bool, str, float | None]]:
    def check(dims: dict[str, Any], dtype: torch.dtype, out: dict[str, torch.Tensor],
              ref: dict[str, torch.Tensor]) -> tuple[bool, str, float | None]:
        worst = 0.0
        for n in names:
            ok, reason, rel = compare_dense(n, out[n], ref[n], REL_L2_TOL[dtype])
            if not ok:
                return ok, reason, rel
            worst = max(worst, rel or 0.0)
        return True, "", worst
    return check


# --- dense_gemm ------------------------------------------------------------------------------------

def _gemm_inputs(d: dict[str, Any], dt: torch.dtype, m: int, seed: int, dev: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": _randn((m, d["K"]), g, dev, dt), "w": _weight((d["N"], d["K"]), d["K"], g, dev, dt)}


def _gemm_stock(d: dict[str, Any]) -> KernelFn:
    def stock_gemm(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
        torch.matmul(x, w.t(), out=out)
    return stock_gemm


DENSE_GEMM = SlotSemantics(
    make_inputs=_gemm_inputs,
    alloc_outputs=lambda d, dt, m, dev: {"out": torch.empty((m, d["N"]), device=dev, dtype=dt)},
    reference=lambda d, i: {"out": i["x"].to(ref_dtype(i["x"].device)) @ i["w"].to(ref_dtype(i["x"].device)).t()},
    stock=_gemm_stock,
    check=_check_all(("out",)),
)


# --- add_rmsnorm -----------------------------------------------------------------------------------

def _addnorm_inputs(d: dict[str, Any], dt: torch.dtype, m: int, seed: int, dev: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h = d["H"]
    return {"x": _randn((m, h), g, dev, dt), "residual": _randn((m, h), g, dev, dt), "weight": _norm_weight(h, g, dev, dt)}


def _norm_outputs(n: int, dt: torch.dtype, m: int, dev: torch.device) -> dict[str, torch.Tensor]:
    return {"out": torch.empty((m, n), device=dev, dtype=dt), "residual_out": torch.empty((m, n), device=dev, dtype=dt)}


def _addnorm_ref(d: dict[str, Any], i: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    r = i["x"].to(ref_dtype(i["x"].device)) + i["residual"].to(ref_dtype(i["x"].device))
    return {"out": _rms_norm(r, i["weight"], d["eps"]), "residual_out": r}


def _addnorm_stock(d: dict[str, Any]) -> KernelFn:
    eps = d["eps"]

    def stock_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, out: torch.Tensor,
                          residual_out: torch.Tensor) -> None:
        r = x.float() + residual.float()
        residual_out.copy_(r)
        out.copy_(_rms_norm_native(r, weight, eps))
    return stock_add_rmsnorm


ADD_RMSNORM = SlotSemantics(_addnorm_inputs, lambda d, dt, m, dev: _norm_outputs(d["H"], dt, m, dev), _addnorm_ref,
                            _addnorm_stock, _check_all(("out", "residual_out")))


# --- rmsnorm_gemm ----------------------------------------------------------------------------------

def _normgemm_inputs(d: dict[str, Any], dt: torch.dtype, m: int, seed: int, dev: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    n, k = d["N"], d["K"]
    return {"x": _randn((m, k), g, dev, dt), "norm_weight": _norm_weight(k, g, dev, dt),
            "w": _weight((n, k), k, g, dev, dt)}


def _normgemm_ref(d: dict[str, Any], i: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    rd = ref_dtype(i["x"].device)
    return {"out": _rms_norm(i["x"].to(rd), i["norm_weight"], d["eps"]) @ i["w"].to(rd).t()}


def _normgemm_stock(d: dict[str, Any]) -> KernelFn:
    eps = d["eps"]

    def stock_rmsnorm_gemm(x: torch.Tensor, norm_weight: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
        torch.matmul(_rms_norm_native(x.float(), norm_weight, eps), w.t(), out=out)
    return stock_rmsnorm_gemm


RMSNORM_GEMM = SlotSemantics(_normgemm_inputs, lambda d, dt, m, dev: {"out": torch.empty((m, d["N"]), device=dev, dtype=dt)},
                             _normgemm_ref, _normgemm_stock, _check_all(("out",)))


# --- mla_norms_gemm --------------------------------------------------------------------------------

def _mlanorms_inputs(d: dict[str, Any], dt: torch.dtype, m: int, seed: int, dev: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 1_000_003)  # the kv latent's own stream: the q part stays as seeded
    kv = d["KV"]
    return {**_normgemm_inputs(d, dt, m, seed, dev), "kv": _randn((m, kv), g, dev, dt),
            "kv_norm_weight": _norm_weight(kv, g, dev, dt)}


def _mlanorms_ref(d: dict[str, Any], i: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    rd = ref_dtype(i["kv"].device)
    return {**_normgemm_ref(d, i), "kv_out": _rms_norm(i["kv"].to(rd), i["kv_norm_weight"], d["eps"])}


def _mlanorms_stock(d: dict[str, Any]) -> KernelFn:
    eps, q_part = d["eps"], _normgemm_stock(d)

    def stock_mla_norms_gemm(x: torch.Tensor, norm_weight: torch.Tensor, w: torch.Tensor, kv: torch.Tensor,
                             kv_norm_weight: torch.Tensor, out: torch.Tensor, kv_out: torch.Tensor) -> None:
        q_part(x, norm_weight, w, out)
        kv_out.copy_(_rms_norm_native(kv.float(), kv_norm_weight, eps))
    return stock_mla_norms_gemm


MLA_NORMS_GEMM = SlotSemantics(
    _mlanorms_inputs,
    lambda d, dt, m, dev: {"out": torch.empty((m, d["N"]), device=dev, dtype=dt),
                           "kv_out": torch.empty((m, d["KV"]), device=dev, dtype=dt)},
    _mlanorms_ref, _mlanorms_stock, _check_all(("out", "kv_out")))


# --- oproj_residual_norm ---------------------------------------------------------------------------

def _oproj_inputs(d: dict[str, Any], dt: torch.dtype, m: int, seed: int, dev: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    n, k = d["N"], d["K"]
    return {"a": _randn((m, k), g, dev, dt), "w": _weight((n, k), k, g, dev, dt),
            "residual": _randn((m, n), g, dev, dt), "norm_weight": _norm_weight(n, g, dev, dt)}


def _oproj_ref(d: dict[str, Any], i: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    rd = ref_dtype(i["a"].device)
    r = i["a"].to(rd) @ i["w"].to(rd).t() + i["residual"].to(rd)
    return {"out": _rms_norm(r, i["norm_weight"], d["eps"]), "residual_out": r}


def _oproj_stock(d: dict[str, Any]) -> KernelFn:
    eps = d["eps"]

    def stock_oproj_residual_norm(a: torch.Tensor, w: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor,
                                  out: torch.Tensor, residual_out: torch.Tensor) -> None:
        r = torch.matmul(a, w.t()).float() + residual.float()
        residual_out.copy_(r)
        out.copy_(_rms_norm_native(r, norm_weight, eps))
    return stock_oproj_residual_norm


OPROJ_RESIDUAL_NORM = SlotSemantics(_oproj_inputs, lambda d, dt, m, dev: _norm_outputs(d["N"], dt, m, dev), _oproj_ref,
                                    _oproj_stock, _check_all(("out", "residual_out")))


# --- shared_expert ---------------------------------------------------------------------------------

def _shared_inputs(d: dict[str, Any], dt: torch.dtype, m: int, seed: int, dev: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    k, i = d["K"], d["I"]
    return {"x": _randn((m, k), g, dev, dt), "w13": _weight((2 * i, k), k, g, dev, dt), "w2": _weight((k, i), i, g, dev, dt)}


def _shared_stock(d: dict[str, Any]) -> KernelFn:
    def stock_shared_expert(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, out: torch.Tensor) -> None:
        torch.matmul(_silu_mul(torch.matmul(x, w13.t())), w2.t(), out=out)
    return stock_shared_expert


SHARED_EXPERT = SlotSemantics(
    _shared_inputs, lambda d, dt, m, dev: {"out": torch.empty((m, d["K"]), device=dev, dtype=dt)},
    lambda d, i: {"out": _swiglu_ref(i["x"].to(ref_dtype(i["x"].device)), i["w13"], i["w2"])},
    _shared_stock, _check_all(("out",)))


# --- moe_experts -----------------------------------------------------------------------------------

def _moe_inputs(d: dict[str, Any], dt: torch.dtype, m: int, seed: int, dev: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    e, k, i, top_k = d["E"], d["K"], d["I"], d["top_k"]
    w13 = torch.empty((e, 2 * i, k), device=dev, dtype=dt)
    w2 = torch.empty((e, k, i), device=dev, dtype=dt)
    for j in range(e):
        w13[j].copy_(_weight((2 * i, k), k, g, dev, dt))
        w2[j].copy_(_weight((k, i), i, g, dev, dt))
    ga = torch.Generator().manual_seed(seed + _MOE_ACT_SEED_OFFSET)
    x = _randn((m, k), ga, dev, dt)
    shared = d.get("shared", 0)  # moe_experts_shared: the last `shared` experts are in every row, weight 1
    routed_k = top_k - shared
    ids = torch.rand((m, e - shared), generator=ga).argsort(dim=1)[:, :routed_k]
    w = 0.5 + torch.rand((m, routed_k), generator=ga)
    w = w / w.sum(dim=1, keepdim=True)
    if shared:
        ids = torch.cat([ids, torch.arange(e - shared, e).expand(m, shared)], dim=1)
        w = torch.cat([w * 2.5, torch.ones((m, shared))], dim=1)
    return {"x": x, "w13": w13, "w2": w2, "topk_ids": ids.to(device=dev, dtype=torch.int32),
            "topk_weights": w.to(device=dev, dtype=torch.float32)}


def _moe_ref(d: dict[str, Any], inp: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    rd = ref_dtype(inp["x"].device)
    x = inp["x"].to(rd)
    ids = inp["topk_ids"].long()
    tw = inp["topk_weights"].to(rd)
    out = torch.zeros((x.shape[0], d["K"]), device=x.device, dtype=rd)
    for e in ids.unique().tolist():
        tok, j = (ids == e).nonzero(as_tuple=True)
        out.index_add_(0, tok, _swiglu_ref(x[tok], inp["w13"][e], inp["w2"][e]) * tw[tok, j].unsqueeze(1))
    return {"out": out}


def _moe_stock(d: dict[str, Any]) -> KernelFn:
    def stock_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
                  topk_weights: torch.Tensor, out: torch.Tensor) -> None:
        ids = topk_ids.long()
        acc = torch.zeros(out.shape, device=out.device, dtype=torch.float32)
        for e in ids.unique().tolist():
            tok, j = (ids == e).nonzero(as_tuple=True)
            y = torch.matmul(_silu_mul(torch.matmul(x[tok], w13[e].t())), w2[e].t())
            acc.index_add_(0, tok, y.float() * topk_weights[tok, j].unsqueeze(1))
        out.copy_(acc)
    return stock_moe


MOE_EXPERTS = SlotSemantics(_moe_inputs, lambda d, dt, m, dev: {"out": torch.empty((m, d["K"]), device=dev, dtype=dt)},
                            _moe_ref, _moe_stock, _check_all(("out",)))


# --- router ----------------------------------------------------------------------------------------

def _scores(logits: torch.Tensor, scoring: str) -> torch.Tensor:
    if scoring == "sigmoid":
        return torch.sigmoid(logits)
    if scoring == "softmax":
        return torch.softmax(logits, dim=-1)
    raise ValueError(f"unknown scoring {scoring!r}")


def grouped_topk(scores: torch.Tensor, bias: torch.Tensor, top_k: int, n_group: int, topk_group: int,
                 scaling: float, norm: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, e = scores.shape
    choice = scores + bias.to(scores.dtype)
    masked = choice
    if n_group > 1:
        group_scores = choice.view(m, n_group, e // n_group).topk(2, dim=-1).values.sum(dim=-1)
        keep = group_scores.topk(topk_group, dim=-1).indices
        group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, keep, True)
        expert_mask = group_mask.unsqueeze(-1).expand(m, n_group, e // n_group).reshape(m, e)
        masked = choice.masked_fill(~expert_mask, float("-inf"))
    ids = masked.topk(top_k, dim=-1).indices
    w = scores.gather(1, ids)
    if norm:
        w = w / w.sum(dim=-1, keepdim=True)
    return ids, w * scaling, choice


def _router_inputs(d: dict[str, Any], dt: torch.dtype, m: int, seed: int, dev: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    bias_std = 0.02 if d["scoring"] == "sigmoid" else 0.1 / d["E"]
    return {"x": _randn((m, d["K"]), g, dev, dt), "w": _weight((d["E"], d["K"]), d["K"], g, dev, dt),
            "bias": _randn((d["E"],), g, dev, torch.float32, std=bias_std)}


def _router_ref(d: dict[str, Any], i: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    rd = ref_dtype(i["x"].device)
    scores = _scores(i["x"].to(rd) @ i["w"].to(rd).t(), d["scoring"])
    ids, w, choice = grouped_topk(scores, i["bias"], d["top_k"], d["n_group"], d["topk_group"], d["scaling"], d["norm"])
    return {"topk_ids": ids.to(torch.int32), "topk_weights": w, "scores": scores, "choice": choice}


def _router_stock(d: dict[str, Any]) -> KernelFn:
    def stock_router(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, topk_ids: torch.Tensor,
                     topk_weights: torch.Tensor) -> None:
        scores = _scores(torch.matmul(x, w.t()).float(), d["scoring"])
        ids, wts, _ = grouped_topk(scores, bias, d["top_k"], d["n_group"], d["topk_group"], d["scaling"], d["norm"])
        topk_ids.copy_(ids)
        topk_weights.copy_(wts)
    return stock_router


def _valid_tie(d: dict[str, Any], ids: torch.Tensor, scores: torch.Tensor, choice: torch.Tensor) -> bool:
    """Is ``ids`` the grouped top-k of ``choice`` after moving every score by at most the rounding delta?"""
    e, n_group, topk_group = d["E"], d["n_group"], d["topk_group"]
    delta = ROUTER_SCORE_DELTA_SIGMOID if d["scoring"] == "sigmoid" else ROUTER_SCORE_DELTA_SOFTMAX_REL * scores.max().item()
    gsize = e // n_group
    chosen = torch.zeros(e, dtype=torch.bool)
    chosen[ids] = True
    used = sorted(set((ids // gsize).tolist()))
    if len(used) > topk_group:
        return False
    group_scores = choice.view(n_group, gsize).topk(min(2, gsize), dim=-1).values.sum(dim=-1)
    others = [g for g in range(n_group) if g not in used]
    for fill in itertools.combinations(others, topk_group - len(used)):
        kept = torch.zeros(n_group, dtype=torch.bool)
        kept[used + list(fill)] = True
        if (~kept).any() and group_scores[kept].min() < group_scores[~kept].max() - 4 * delta:
            continue
        rest = kept.repeat_interleave(gsize) & ~chosen
        if not rest.any() or choice[chosen].min() >= choice[rest].max() - 2 * delta:
            return True
    return False


def _router_check(d: dict[str, Any], dtype: torch.dtype, out: dict[str, torch.Tensor],
                  ref: dict[str, torch.Tensor]) -> tuple[bool, str, float | None]:
    ids = out["topk_ids"].detach().cpu().long()
    wts = out["topk_weights"].detach().to("cpu", torch.float64)
    ref_ids = ref["topk_ids"].detach().cpu().long()
    scores = ref["scores"].detach().to("cpu", torch.float64)
    choice = ref["choice"].detach().to("cpu", torch.float64)
    if ids.shape != ref_ids.shape or wts.shape != ref_ids.shape:
        return False, f"outputs have shapes {tuple(ids.shape)}, {tuple(wts.shape)}; expected {tuple(ref_ids.shape)}", None
    if ((ids < 0) | (ids >= d["E"])).any():
        return False, "topk_ids outside 0..E-1 (unwritten ids stay -1)", None
    srt = ids.sort(dim=1).values
    if (srt[:, 1:] == srt[:, :-1]).any():
        return False, "topk_ids repeat an expert in a row", None
    if not torch.isfinite(wts).all():
        return False, "topk_weights contain NaN/Inf (unwritten outputs stay NaN)", None
    differs = (srt != ref_ids.sort(dim=1).values).any(dim=1)
    for row in differs.nonzero().flatten().tolist():
        if not _valid_tie(d, ids[row], scores[row], choice[row]):
            return False, f"topk_ids row {row}: {sorted(ids[row].tolist())} is not the top-k {sorted(ref_ids[row].tolist())}", None
    expected = scores.gather(1, ids)
    if d["norm"]:
        expected = expected / expected.sum(dim=1, keepdim=True)
    expected = expected * d["scaling"]
    rel = ((wts - expected).norm() / expected.norm()).item()
    if ((wts - expected).abs() > ROUTER_WEIGHT_RTOL[d["scoring"]] * expected.abs() + 1e-6).any():
        return False, f"topk_weights off by more than {ROUTER_WEIGHT_RTOL[d['scoring']]:.0e} relative", rel
    return True, "", rel


ROUTER = SlotSemantics(
    _router_inputs,
    lambda d, dt, m, dev: {"topk_ids": torch.empty((m, d["top_k"]), device=dev, dtype=torch.int32),
                           "topk_weights": torch.empty((m, d["top_k"]), device=dev, dtype=torch.float32)},
    _router_ref, _router_stock, _router_check)


SLOTS: dict[str, SlotSemantics] = {
    "dense_gemm": DENSE_GEMM, "router": ROUTER, "moe_experts": MOE_EXPERTS, "shared_expert": SHARED_EXPERT,
    "oproj_residual_norm": OPROJ_RESIDUAL_NORM, "add_rmsnorm": ADD_RMSNORM, "rmsnorm_gemm": RMSNORM_GEMM,
    "mla_norms_gemm": MLA_NORMS_GEMM, "moe_experts_shared": MOE_EXPERTS,  # the same semantics; its dims say shared
}


def semantics(slot: str) -> SlotSemantics:
    try:
        return SLOTS[slot]
    except KeyError:
        raise KeyError(f"this package has no semantics for slot {slot!r}; known: {', '.join(sorted(SLOTS))}") from None


def poison(outputs: dict[str, torch.Tensor]) -> None:
    """NaN into float outputs, -1 into integer ones: a kernel must write every element."""
    for t in outputs.values():
        t.fill_(float("nan") if t.is_floating_point() else -1)
