"""The ring GEMV (kernels/variants/cute/dense_gemm_ring_gemv.py) on a machine with no GPU: its sm_90a build
through the CuTe backend and what its PTX shows: one cp.async per W (and x) vector and step, STAGES - 1 groups in
flight before the first wait, every ring read of a step preceded by a wait that has landed the copy of exactly
those bytes (a replay of the PTX's copies, commits, waits and reads), W through L2 only (.cg) and x through L1
(.ca), MMAs fed by the ring reads, one barrier, one store per output, the K split's partials met in the last CTA,
and the constraints. Its numbers are checked on the GPU by the service's own check stage at every batch size a plan
runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cute_ptx_helpers import FUSED_QKV_A, O_PROJ, ROOT, load_variant, plan_runs, ptx_of, shape

VARIANT = ROOT / "kernels/variants/cute/dense_gemm_ring_gemv.py"
Q_B_PROJ = {"N": 1536, "K": 1536}


@pytest.fixture()
def mod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return load_variant(VARIANT, tmp_path, monkeypatch)


def lines(ptx: str) -> list[str]:
    return [ln.strip() for ln in ptx.splitlines()]


def ring_events(ptx: str) -> list[tuple[str, int]]:
    """The PTX's ring traffic in order: ("copy", byte offset), ("commit", 0), ("wait", n), ("read", byte offset),
    offsets from the thread's first ring address (registers defined as another plus a constant are resolved)."""
    offset: dict[str, tuple[str, int]] = {}
    events: list[tuple[str, int]] = []
    bases: set[str] = set()

    def at(reg: str, imm: str | None) -> int:
        base, off = offset.get(reg, (reg, 0))
        bases.add(base)
        return off + int(imm or 0)

    for ln in lines(ptx):
        if m := re.match(r"add\.s32\s+(%r\d+), (%r\d+), (-?\d+);", ln):
            base, off = offset.get(m.group(2), (m.group(2), 0))
            offset[m.group(1)] = (base, off + int(m.group(3)))
        elif m := re.match(r"cp\.async\.c[ag]\.shared\.global\s+\[(%r\d+)(?:\+(\d+))?\]", ln):
            events.append(("copy", at(m.group(1), m.group(2))))
        elif ln.startswith("cp.async.commit_group"):
            events.append(("commit", 0))
        elif m := re.match(r"cp\.async\.wait_group\s+(\d+);", ln):
            events.append(("wait", int(m.group(1))))
        elif m := re.match(r"ld\.shared\.v4\.u32\s+\{[^}]*\}, \[(%r\d+)(?:\+(\d+))?\]", ln):
            events.append(("read", at(m.group(1), m.group(2))))
    assert len(bases) == 1, f"ring addresses from more than one base register: {bases}"
    return events


def replay(events: list[tuple[str, int]]) -> tuple[int, int]:
    """Runs the copies, commits and waits as cp.async defines them; asserts that each read finds its bytes landed
    by a completed group and no later copy to them issued. Returns (reads, most groups pending)."""
    open_group: list[int] = []
    pending: list[list[int]] = []          # committed groups not yet waited for, oldest first
    landed: set[int] = set()
    reads = deepest = 0
    for kind, value in events:
        if kind == "copy":
            assert all(value not in g for g in pending + [open_group]), "two copies in flight to one slot"
            landed.discard(value)
            open_group.append(value)
        elif kind == "commit":
            pending.append(open_group)
            open_group = []
            deepest = max(deepest, sum(1 for g in pending if g))
        elif kind == "wait":
            while len(pending) > value:
                landed.update(pending.pop(0))
        elif kind == "read":
            # a refill in flight un-lands its bytes (the copy above), so this also catches a read while refilled
            assert value in landed, f"ring read at +{value} before its copy landed"
            reads += 1
    return reads, deepest


@pytest.mark.parametrize(("config", "m", "w_vectors", "x_vectors", "mmas"), [
    # W as A: rows g, g + 8 of a 16-row tile; an MMA per K half and n-tile (8 columns of M)
    ({"WROWS": 16, "RT": 1, "KWARPS": 8, "STAGES": 6, "XRING": 1}, 16, 2, 2, 2 * 2),
    ({"WROWS": 16, "RT": 2, "KWARPS": 14, "STAGES": 4, "XRING": 1}, 4, 4, 1, 2 * 2),
    # W as B: row g of an 8-row tile; x rows g, g + 8 are A (rows 8-15 are zeros when M <= 8)
    ({"WROWS": 8, "RT": 1, "KWARPS": 4, "STAGES": 12, "XRING": 1}, 16, 1, 2, 2),
    ({"WROWS": 8, "RT": 2, "KWARPS": 8, "STAGES": 3, "XRING": 1}, 1, 2, 1, 2 * 2),
])
def test_every_vector_is_copied_once_and_read_back_once_per_step(mod, config: dict, m: int, w_vectors: int,
                                                                 x_vectors: int, mmas: int) -> None:
    ptx = ptx_of(mod, config, shape(m, **FUSED_QKV_A))
    assert ".target sm_90a" in ptx and all(c in ptx for c in mod.CLAIMS["ptx_contains"])
    body = lines(ptx)
    steps = FUSED_QKV_A["K"] // 32 // config["KWARPS"]
    assert sum(ln.startswith("cp.async.cg.shared.global") for ln in body) == w_vectors * steps   # W: L2 only
    assert sum(ln.startswith("cp.async.ca.shared.global") for ln in body) == x_vectors * steps   # x: through L1
    assert all(", 16, 16;" in ln for ln in body if ln.startswith(("cp.async.cg.", "cp.async.ca.")))  # 16 B each
    assert sum(ln.startswith("ld.shared.v4.u32") for ln in body) == (w_vectors + x_vectors) * steps
    assert not any(ln.startswith("ld.global") for ln in body)
    assert sum(ln.startswith("mma.sync") for ln in body) == mmas * steps
    assert len(re.findall(r"\bbar\.sync\b", ptx)) == 1
    assert ".local" not in ptx


@pytest.mark.parametrize(("config", "m", "shp"), [
    ({"WROWS": 16, "RT": 1, "KWARPS": 8, "STAGES": 6, "XRING": 1}, 16, FUSED_QKV_A),
    ({"WROWS": 8, "RT": 1, "KWARPS": 2, "STAGES": 8, "XRING": 0}, 4, O_PROJ),
    ({"WROWS": 8, "RT": 1, "KWARPS": 8, "STAGES": 6, "XRING": 1}, 16, Q_B_PROJ),   # STAGES = all 6 steps
    ({"WROWS": 16, "RT": 1, "KWARPS": 1, "STAGES": 2, "XRING": 1}, 1, O_PROJ),
])
def test_each_read_waits_for_its_own_copy_and_stages_minus_one_steps_stay_in_flight(mod, config: dict, m: int,
                                                                                    shp: dict) -> None:
    ptx = ptx_of(mod, config, shape(m, **shp))
    steps = shp["K"] // 32 // config["KWARPS"]
    per_step = config["RT"] * config["WROWS"] // 8 + config["XRING"] * ((m + 7) // 8)
    events = ring_events(ptx)
    waits = [v for kind, v in events if kind == "wait"]
    assert waits == [config["STAGES"] - 1] * steps
    reads, deepest = replay(events)
    assert reads == per_step * steps
    # before the first wait, STAGES steps' copies have been issued (the prologue's and step 0's refill)
    first_wait = next(i for i, (kind, _) in enumerate(events) if kind == "wait")
    assert sum(kind == "copy" for kind, _ in events[:first_wait]) == per_step * min(config["STAGES"], steps)
    assert deepest == min(config["STAGES"], steps)


def test_the_replay_catches_a_read_before_its_wait() -> None:
    """The checker itself can fail: a read whose group is pending, a read while refilled, two copies to a slot."""
    with pytest.raises(AssertionError, match="before its copy landed"):
        replay([("copy", 0), ("commit", 0), ("copy", 16), ("commit", 0), ("wait", 1), ("read", 16)])
    with pytest.raises(AssertionError, match="before its copy landed"):   # read while being refilled
        replay([("copy", 0), ("commit", 0), ("wait", 0), ("copy", 0), ("commit", 0), ("read", 0)])
    with pytest.raises(AssertionError, match="two copies in flight"):
        replay([("copy", 0), ("commit", 0), ("copy", 0), ("commit", 0), ("wait", 0)])


@pytest.mark.parametrize(("config", "m", "shp"), [
    ({"WROWS": 16, "RT": 4, "KWARPS": 8, "STAGES": 4, "KSPLIT": 4}, 16, FUSED_QKV_A),
    ({"WROWS": 16, "RT": 2, "KWARPS": 4, "STAGES": 4, "KSPLIT": 3}, 4, Q_B_PROJ),
])
def test_a_k_split_ctas_partials_meet_in_the_last_cta_in_k_order(mod, config: dict, m: int, shp: dict) -> None:
    """KSPLIT > 1: each CTA covers its slice of K (a 1/KSPLIT share of the copies), stores fp32 partials, fences,
    and one thread counts the CTA in with one atomic; the CTA that counts KSPLIT - 1 fences, adds the KSPLIT
    partials of each output (slice 0 first, one partial-buffer stride apart) and stores bf16, then rearms its
    counter with a store of 0."""
    ptx = ptx_of(mod, config, shape(m, **shp))
    body = lines(ptx)
    steps = shp["K"] // 32 // config["KWARPS"] // config["KSPLIT"]
    rows = config["WROWS"] * config["RT"]
    threads = 32 * config["KWARPS"]
    stores = (m * rows + threads - 1) // threads
    assert sum(ln.startswith("cp.async.cg") for ln in body) == config["RT"] * config["WROWS"] // 8 * steps
    assert sum(ln.startswith("st.global.f32") for ln in body) == stores
    atomics = [i for i, ln in enumerate(body) if ln.startswith("atom.global.add.u32")]
    fences = [i for i, ln in enumerate(body) if ln.startswith("fence.acq_rel.gpu")]
    assert len(atomics) == 1 and len(fences) == 2 and fences[0] < atomics[0] < fences[1]
    assert re.search(rf"setp\.ne\.s32\s+%p\d+, %r\d+, {config['KSPLIT'] - 1};", ptx)  # "am I the last CTA"
    sums = [ln for ln in body[fences[1]:] if ln.startswith("ld.global.f32")]
    assert len(sums) == config["KSPLIT"] * stores
    stride = m * shp["N"] * 4
    offsets = [int(o or 0) for o in re.findall(r"ld\.global\.f32\s+%f\d+, \[%rd\d+(?:\+(\d+))?\]", "\n".join(sums))]
    assert offsets[:config["KSPLIT"]] == [z * stride for z in range(config["KSPLIT"])]
    assert sum(ln.startswith("st.global.b16") for ln in body[fences[1]:]) == stores
    assert body[[i for i, ln in enumerate(body) if ln.startswith("st.global")][-1]].startswith("st.global.u32")


def test_without_k_split_no_partials_no_atomics(mod) -> None:
    ptx = ptx_of(mod, {"WROWS": 16, "RT": 1, "KWARPS": 8, "STAGES": 6}, shape(16, **FUSED_QKV_A))
    assert "atom." not in ptx and "st.global.f32" not in ptx and "fence." not in ptx


@pytest.mark.parametrize(("config", "m", "shp"), [
    ({"WROWS": 16, "RT": 1, "KWARPS": 8, "STAGES": 8}, 16, FUSED_QKV_A),   # 28 steps: a remainder
    ({"WROWS": 16, "RT": 1, "KWARPS": 2, "STAGES": 8}, 4, O_PROJ),         # 16 steps: a mask
])
def test_rotate_changes_only_where_a_cta_starts(mod, config: dict, m: int, shp: dict) -> None:
    """ROTATE 0 builds exactly the unrotated kernel (the config without the key); ROTATE 1 keeps every copy,
    wait, read and MMA, and its ring still passes the replay."""
    plain = ptx_of(mod, config, shape(m, **shp))
    assert ptx_of(mod, {**config, "ROTATE": 0}, shape(m, **shp)) == plain
    rotated = ptx_of(mod, {**config, "ROTATE": 1}, shape(m, **shp))
    assert rotated != plain
    for key in ("cp.async.cg", "cp.async.ca", "cp.async.wait_group", "ld.shared.v4.u32", "mma.sync"):
        assert sum(ln.startswith(key) for ln in lines(rotated)) == sum(ln.startswith(key) for ln in lines(plain))
    steps = shp["K"] // 32 // config["KWARPS"]
    reads, _ = replay(ring_events(rotated))
    assert reads == (config["WROWS"] // 8 + (m + 7) // 8) * steps


def test_x_loaded_at_the_step_with_xring_0(mod) -> None:
    body = lines(ptx_of(mod, {"WROWS": 8, "RT": 1, "KWARPS": 8, "STAGES": 8, "XRING": 0},
                        shape(4, **FUSED_QKV_A)))
    steps = FUSED_QKV_A["K"] // 32 // 8
    assert sum(ln.startswith("cp.async.cg") for ln in body) == steps
    assert not any(ln.startswith("cp.async.ca") for ln in body)
    assert sum(ln.startswith("ld.global") and ".v4" in ln for ln in body) == steps


@pytest.mark.parametrize(("config", "m", "stores"), [
    ({"WROWS": 16, "RT": 4, "KWARPS": 1, "STAGES": 4}, 16, 32),   # 1024 outputs over 32 threads
    ({"WROWS": 16, "RT": 1, "KWARPS": 8, "STAGES": 4}, 4, 1),     # 64 outputs, 256 threads
    ({"WROWS": 8, "RT": 2, "KWARPS": 1, "STAGES": 4}, 16, 8),     # 256 outputs over 32 threads
])
def test_every_output_has_a_thread_that_stores_it(mod, config: dict, m: int, stores: int) -> None:
    ptx = ptx_of(mod, config, shape(m, **O_PROJ))
    assert len(re.findall(r"^\s*st\.global\.b16", ptx, re.M)) == stores


@pytest.mark.parametrize(("config", "shp", "rule"), [
    ({"RT": 1, "KWARPS": 1, "STAGES": 2}, shape(17, **FUSED_QKV_A), "M <= 16"),
    ({"WROWS": 16, "RT": 4, "KWARPS": 1, "STAGES": 2}, shape(1, 1040, 1024), "N % (WROWS * RT) == 0"),
    ({"WROWS": 8, "RT": 1, "KWARPS": 3, "STAGES": 2}, shape(1, **FUSED_QKV_A), "K % (32 * KWARPS * KSPLIT) == 0"),
    ({"WROWS": 8, "RT": 1, "KWARPS": 4, "KSPLIT": 3}, shape(1, **FUSED_QKV_A), "K % (32 * KWARPS * KSPLIT) == 0"),
    ({"WROWS": 8, "RT": 1, "KWARPS": 8, "STAGES": 8}, shape(1, 1536, 1536), "STAGES <= K // (32 * KWARPS * KSPLIT)"),
    ({"WROWS": 8, "RT": 1, "KWARPS": 2, "STAGES": 8, "KSPLIT": 4}, shape(1, 1536, 1536),
     "STAGES <= K // (32 * KWARPS * KSPLIT)"),
    ({"WROWS": 8, "RT": 1, "KWARPS": 1, "STAGES": 4}, shape(1, **FUSED_QKV_A), "K // (32 * KWARPS * KSPLIT) <= 112"),
    ({"WROWS": 16, "RT": 4, "KWARPS": 16, "STAGES": 2}, shape(16, **O_PROJ),
     "KWARPS * WROWS * RT * ((M + 7) // 8) <= 1024"),
    ({"WROWS": 16, "RT": 2, "KWARPS": 14, "STAGES": 16, "XRING": 1}, shape(16, **FUSED_QKV_A), "<= 232448"),
    ({"WROWS": 16, "RT": 4, "KWARPS": 8, "STAGES": 5, "KSPLIT": 4}, shape(16, **FUSED_QKV_A), "<= 232448"),
])
def test_constraints_refuse_ragged_or_oversized_configs(mod, config: dict, shp: dict, rule: str) -> None:
    with pytest.raises(ValueError, match=re.escape(rule)):
        mod._params(config, shp)


@pytest.mark.parametrize(("plan_name", "runs", "ring_runs"), [("ring_gemv_zp", 70, 70), ("zp_all", 106, 70),
                                                            ("ring_ksplit_zq", 44, 44), ("zq_all", 108, 108),
                                                            ("ring_rotate_zs", 54, 54), ("zs_all", 97, 97),
                                                            ("ring_rotate_zt", 43, 43)])
def test_the_ring_plans_hold_only_configs_the_service_takes(plan_name: str, runs: int, ring_runs: int,
                                                                     tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    seen = plan_runs(plan_name, tmp_path, monkeypatch)
    assert len(seen) == len(set(seen)) == runs
    # the ring GEMV's runs come first, so a deadline cuts the older kernel's neighbours, not the new one
    ring = [f.endswith("ring_gemv.py") for f, *_ in seen]
    assert ring == sorted(ring, reverse=True) and sum(ring) == ring_runs
