"""Writes session 24's plans: the chained forms (build(..., pdl=1)) of o_proj's GEMV, the router and the routed
experts are checked by the service only where a job runs their files on an sm_90+ card (workers/chain.py's race),
and bench/decode_layer.py's tuned_chain path times them. So each plan carries the incumbents' own configs of those
three files at M = 1, 2, 4, taken from the table the call resumes (the files changed, so each config runs anew, its
chained form checked), beside the plan that card still has to run:
- bench/plans/s24_h100.json: session 23's call B (bench/plans/s23b_fused_pdl.json) + those incumbents from table
  h100-s23;
- bench/plans/s24_h200.json: session 23's H200 plan (bench/plans/s23_h200.json) + those incumbents from table ZN
  (ZN has no oproj_residual_norm_gemv: that plan brings its configs).
- bench/plans/s24b_h100.json: the H100's incumbents alone, for a second call resumed from the first's table (h100-s24),
  after the chained check stopped holding three sets of inputs and a copy of the weights: four moe_experts runs of
  the first call ran out of the H100's memory in that check (twelve workers side by side).
Run from the repo root after make_s23.py.
"""

import importlib.util
import json
from pathlib import Path

FILES = {"router": "kernels/variants/triton/router_fused.py",
         "moe_experts": "kernels/variants/triton/moe_experts_gemv.py",
         "oproj_residual_norm": "kernels/variants/triton/oproj_residual_norm_gemv.py"}
BUCKETS = ("1", "2", "3-4")
DROPPED = {"L2_PF"}  # parameters a file no longer has (moe_experts_gemv's L2 prefetch went in session ZI)


def defaults(file: str) -> dict:
    spec = importlib.util.spec_from_file_location(Path(file).stem, file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    default = getattr(mod, "DEFAULT_CONFIG", None) or mod.DEFAULT
    return {k: default[k] for k in mod.CONFIG_SPACE}


def incumbents(table: str) -> list[dict]:
    """One plan item per file: the distinct configs of that file's winners at buckets 1, 2 and 3-4."""
    doc = json.loads(Path(table).read_text())
    variant_files = doc["variant_files"]
    items = []
    for slot, file in FILES.items():
        configs = []
        for w in doc["winners"]:
            ev = w["evidence"]
            if (w["slot"] != slot or w["batch_bucket"] not in BUCKETS or w["is_stock"]
                    or variant_files.get(str(ev["variant_id"])) != file):
                continue
            cfg = {k: v for k, v in ev["config"].items() if k not in DROPPED}
            cfg = {**defaults(file), **cfg}  # a param the table's config predates (ZN's router: PDL) at its default
            if cfg not in configs:
                configs.append(cfg)
        if configs:
            items.append({"file": file, "slot": slot, "language": "triton", "configs": configs,
                          "batch_sizes": [1, 2, 4]})
    return items


for card, base, table in (("h100", "bench/plans/s23b_fused_pdl.json",
                           "bench/results/2026-12-06-h100-decode-tuning-h100-s23.json"),
                          ("h200", "bench/plans/s23_h200.json", "bench/results/2026-12-06-h200-decode-tuning-zn.json")):
    plan = json.loads(Path(base).read_text())
    extra = incumbents(table)
    plan["variants"] = [{**v, "batch_sizes": v.get("batch_sizes", plan["deployment"]["batch_sizes"])}
                        for v in plan["variants"]] + extra
    plan["deployment"]["batch_sizes"] = sorted({m for v in plan["variants"] for m in v["batch_sizes"]})
    if card == "h100":
        # and the shared expert's new M = 3-64 winner (call A: REDUCE partials, PDL, 16 splits, 9.93 us at M = 4) with
        # its two runners-up at M = 1 and 2, where shared_expert_gemv holds the buckets at 10.02 and 12.44 us
        se = [v for v in plan["variants"] if v["file"].endswith("shared_expert_fused.py")][0]
        wanted = ({"SPLIT_K": 16}, {"BLOCK_N": 32, "BLOCK_K": 256}, {"SPLIT_K": 8, "BLOCK_N": 16, "BLOCK_N2": 64})
        picks = [[c for c in se["configs"] if c["REDUCE"] == "partials" and c["PDL"] == 1
                  and all(c[k] == v for k, v in w.items())] for w in wanted]
        assert all(len(p) == 1 for p in picks), picks
        se_small = {**se, "configs": [p[0] for p in picks], "batch_sizes": [1, 2]}
        second = {"deployment": {**plan["deployment"], "batch_sizes": [1, 2, 4]}, "variants": extra + [se_small]}
        Path("bench/plans/s24b_h100.json").write_text(json.dumps(second, indent=1) + "\n")
        # call C: the routed experts' incumbents alone, twelve workers on them at once, after the check learned to
        # run again with the device to itself when the card runs out of memory (call B: 5 of 9 ran out)
        moe = [v for v in extra if v["slot"] == "moe_experts"]
        third = {"deployment": {**plan["deployment"], "batch_sizes": [1, 2, 4]}, "variants": moe}
        Path("bench/plans/s24c_h100.json").write_text(json.dumps(third, indent=1) + "\n")
    out = Path(f"bench/plans/s24_{card}.json")
    out.write_text(json.dumps(plan, indent=1) + "\n")
    print(f"{out}: {len(plan['variants'])} items; incumbents " + ", ".join(
        f"{Path(v['file']).stem} x{len(v['configs'])}" for v in extra))
