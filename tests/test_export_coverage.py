"""export/coverage.py's unchecked(): the batch sizes a tuned entry serves that none of its runs checked (and the
bucket helpers it shares with GET /v1/winners, kernels/deployment.py)."""

from __future__ import annotations

from export.collect import Collection, Entry, RunEvidence
from export.coverage import unchecked
from kernels.deployment import bucket_ms, spans, unchecked_in


def _entry(slot: str, bucket: str, ms: list[int]) -> Entry:
    # only what unchecked() reads: the entry's place and the M of its runs
    return Entry.model_construct(slot=slot, shape_key=f"{slot}[K=8]", bucket=bucket,
                                 runs=[RunEvidence.model_construct(m=m) for m in ms])


def test_spans_and_bucket_ms() -> None:
    assert spans([7, 3, 5, 6]) == "3,5-7" and spans([33]) == "33" and spans(range(17, 32)) == "17-31"
    assert bucket_ms("5-8") == [5, 6, 7, 8] and bucket_ms("2") == [2]
    assert unchecked_in("5-8", [8, 6, 6]) == [5, 7] and unchecked_in("2", [2]) == [] and unchecked_in("3-4", []) == [3, 4]


def test_unchecked_names_each_served_m_no_run_checked() -> None:
    got = Collection(entries=[_entry("router", "5-8", [8]), _entry("dense_gemm", "33-64", [40, 64]),
                              _entry("router", "2", [2]), _entry("dense_gemm", "3-4", [3, 4])])
    found = {(p.slot, p.bucket): p.reason for p in unchecked(got)}
    assert set(found) == {("router", "5-8"), ("dense_gemm", "33-64")}  # a bucket its runs covered is not listed
    assert found["router", "5-8"].startswith("served at M=5-7, checked at M=8 only")
    assert found["dense_gemm", "33-64"].startswith("served at M=33-39,41-63, checked at M=40,64 only")
    assert [p.slot for p in unchecked(got)] == ["dense_gemm", "router"]  # by slot, shape, bucket
