"""bench/ncu_dense.py without a GPU: its item syntax, the parse of Nsight Compute's details CSV into per-kernel
metrics, the Markdown it writes, and that a CSV of another layout is a clear error, not a wrong table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import ncu_dense  # noqa: E402

CSV = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python3","h","kernel_cutlass__gemv_kernel_x","1","7","(448, 1, 1)","(2112, 1, 1)","0","9.0","GPU Speed Of Light Throughput","DRAM Throughput","%","84.10"
"0","1","python3","h","kernel_cutlass__gemv_kernel_x","1","7","(448, 1, 1)","(2112, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","us","10.62"
"0","1","python3","h","kernel_cutlass__gemv_kernel_x","1","7","(448, 1, 1)","(2112, 1, 1)","0","9.0","Occupancy","Achieved Occupancy","%","61.3"
"1","1","python3","h","splitKreduce_kernel","1","7","(32, 1, 1)","(66, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","us","1.50"
'''


def test_items_parse() -> None:
    assert ncu_dense.parse_item("fused_qkv_a:4:stock") == {"shape": "fused_qkv_a", "m": 4, "file": None, "config": None}
    it = ncu_dense.parse_item('o_proj:1:kernels/variants/cute/dense_gemm_ksplit_gemv.py:{"ROWS": 2, "KWARPS": 4}')
    assert it["file"].endswith("dense_gemm_ksplit_gemv.py") and it["config"] == {"ROWS": 2, "KWARPS": 4}
    assert ncu_dense.shape_dims("fused_qkv_a") == {"N": 2112, "K": 7168}


def test_details_csv_becomes_per_kernel_metrics_and_a_table() -> None:
    kernels = ncu_dense.kernels_of(CSV)
    assert [k["kernel"] for k in kernels] == ["kernel_cutlass__gemv_kernel_x", "splitKreduce_kernel"]
    assert kernels[0]["metrics"]["GPU Speed Of Light Throughput/DRAM Throughput"] == ["84.10", "%"]
    assert ncu_dense.headline(kernels[0]) == {"DRAM Throughput": "84.10 %", "Duration": "10.62 us",
                                              "Achieved Occupancy": "61.3 %"}
    doc = {"device": "NVIDIA H100 80GB HBM3", "date": "2026-12-05", "commit": "abc", "command": "bench/ncu_dense.py",
           "items": [{"shape": "fused_qkv_a", "m": 1, "file": None, "config": None, "kernels": kernels},
                     {"shape": "o_proj", "m": 4, "file": "x.py", "config": {}, "kernels": [], "error": "ncu failed"}]}
    md = ncu_dense.markdown(doc)
    assert "| fused_qkv_a | 1 | cuBLAS (stock) | `kernel_cutlass__gemv_kernel_x` | 10.62 us | 84.10 % |" in md
    assert "not profiled: 'ncu failed'" in md


def test_a_csv_of_another_layout_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="lacks"):
        ncu_dense.kernels_of('"ID","Kernel Name","Value"\n"0","k","1"\n')


def test_items_after_the_budget_are_listed_not_profiled_and_a_failed_item_loses_no_other() -> None:
    items = [ncu_dense.parse_item(t) for t in ("fused_qkv_a:1:stock", "o_proj:4:stock", "q_b_proj:1:stock")]
    ran = []

    def run(it: dict) -> str:
        ran.append(it["shape"])
        if it["shape"] == "fused_qkv_a":
            raise RuntimeError("ncu exited 1")
        return CSV

    ncu_dense.profile_items(items, run, budget_s=None)
    assert ran == ["fused_qkv_a", "o_proj", "q_b_proj"]
    assert items[0]["error"].startswith("RuntimeError: ncu exited 1") and len(items[1]["kernels"]) == 2
    ran.clear()
    ncu_dense.profile_items(items, run, budget_s=-1.0)  # spent before the first item
    assert ran == [] and all(it["error"].startswith("not started") for it in items)
