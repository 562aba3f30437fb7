"""export/coverage.py's unchecked(): the batch sizes a tuned entry serves that none of its runs checked, and slower():
those its runs measured slower than stock (and the bucket helpers it shares with GET /v1/winners,
kernels/deployment.py)."""

from __future__ import annotations

from export.collect import Collection, Entry, RunEvidence
from export.coverage import slower, unchecked
from kernels.deployment import bucket_ms, slower_than_stock, spans, unchecked_in


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


def test_slower_names_the_m_a_bucket_serves_with_stock() -> None:
    def ev(m: int, s: float, hi: float) -> RunEvidence:
        return RunEvidence.model_construct(m=m, speedup=s, speedup_ci_hi=hi)
    # bucket 17-32 won at M = 32; its checks timed M = 17 and 18 slower (CI below 1) and 19 a tie (CI over 1)
    e = Entry.model_construct(slot="dense_gemm", shape_key="d[K=8]", bucket="17-32",
                              runs=[ev(32, 1.11, 1.13), ev(17, 0.79, 0.80), ev(18, 0.83, 0.85), ev(19, 0.98, 1.01)])
    assert e.slower_ms == [17, 18] and slower_than_stock([(1, 0.99), (2, None), (3, 1.0), (3, 0.9)]) == [1]
    fast = Entry.model_construct(slot="router", shape_key="r[K=8]", bucket="2", runs=[ev(2, 1.5, 1.6)])
    (p,) = slower(Collection(entries=[e, fast]))
    assert (p.bucket, p.reason) == ("17-32", "measured slower than stock at M=17-18 (down to 0.79x at M=17): the "
                                             "package runs stock there")
