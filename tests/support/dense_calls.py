"""The repeated-call check of a dense_gemm kernel (out = x @ w^T) under the interpreter, shared by the GEMV and
swap-AB variants' tests: three calls (fresh inputs, fresh inputs, the second's again), each on NaN-poisoned
outputs, compared with an fp32 torch reference. A split-K arrival counter left non-zero by one call leaves the
next call's outputs unwritten; a split-order sum makes the repeat bit-identical."""

from __future__ import annotations

from collections.abc import Callable

import torch


def check_repeated_calls(fn: Callable[..., None], m: int, n: int, k: int, label: str) -> None:
    prev = None
    for trial in range(3):
        g = torch.Generator().manual_seed(1000 * m + n + trial)
        if trial < 2:  # fresh inputs; the third call repeats the second's inputs
            x = torch.randn((m, k), generator=g).bfloat16()
            w = (torch.randn((n, k), generator=g) / k ** 0.5).bfloat16()
        x0, w0 = x.clone(), w.clone()
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)  # every element must be written
        fn(x=x, w=w, out=out)
        assert torch.equal(x, x0) and torch.equal(w, w0), "an input was written"
        assert torch.isfinite(out).all(), (label, trial, "unwritten (NaN) outputs")
        ref = x.float() @ w.float().t()
        torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2, msg=lambda s: f"{label}: {s}")
        if trial == 1:
            assert not torch.equal(out, prev), "same output for new inputs"
        if trial == 2:  # partials are summed in split order: bit-identical on the same inputs
            assert torch.equal(out, prev), "not deterministic"
        prev = out.clone()
