"""Writes session 25's plans: the moe_experts_shared slot (kernels/slots/moe_experts_shared.py: the shared expert as the
routed experts' 385th, in every token's list with weight 1), which no card has run. Its kernels are moe_experts' own
files with one more pick a token, so the seeds are each card's moe_experts incumbents:
- moe_experts_gemv at M = 1, 2, 4: each incumbent's w13 half with its own w2 half and with the w2 launch shapes around
  it (top_k 9 pads the w2 program's expert axis to 16, so its best BLOCK_N2 / num_warps2 may move), PDL on;
- moe_experts_grouped at M = 16 and 64: the incumbents as they are.
bench/plans/s25_h100.json seeds from the H100's latest table (h100-s24c), s25_h200.json from the H200's (ZN).
Run from the repo root.
"""

import importlib.util
import json
from pathlib import Path

GEMV, GROUPED = "kernels/variants/triton/moe_experts_gemv.py", "kernels/variants/triton/moe_experts_grouped.py"
SHAPE = {"E": 385, "K": 7168, "I": 256, "top_k": 9, "shared": 1}  # kimi-k2-like at TP8 (tests/test_specs.py)
W2_SHAPES = ({"BLOCK_N2": 1, "num_warps2": 2}, {"BLOCK_N2": 2, "num_warps2": 4}, {"BLOCK_N2": 2, "num_warps2": 8},
             {"BLOCK_N2": 4, "num_warps2": 4}, {"BLOCK_N2": 4, "num_warps2": 8})
DROPPED = {"L2_PF"}  # parameters a file no longer has


def load(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def incumbents(table: str, file: str, buckets: tuple[str, ...]) -> list[dict]:
    doc = json.loads(Path(table).read_text())
    out = []
    for w in doc["winners"]:
        ev = w["evidence"]
        if (w["slot"] == "moe_experts" and w["batch_bucket"] in buckets and not w["is_stock"]
                and doc["variant_files"].get(str(ev["variant_id"])) == file):
            cfg = {k: v for k, v in ev["config"].items() if k not in DROPPED}
            if cfg not in out:
                out.append(cfg)
    return out


def valid(mod, cfg: dict, m: int) -> bool:
    try:
        mod.check_constraints(cfg, {**SHAPE, "M": m})
        return True
    except ValueError:
        return False


gemv, grouped_defaults = load(GEMV), load(GROUPED).DEFAULT_CONFIG
for card, table in (("h100", "bench/results/2026-12-06-h100-decode-tuning-h100-s24c.json"),
                    ("h200", "bench/results/2026-12-06-h200-decode-tuning-zn.json")):
    configs = []
    for inc in incumbents(table, GEMV, ("1", "2", "3-4")):
        for w2 in ({},) + W2_SHAPES:
            cfg = {**inc, **w2, "BLOCK_K2": 256, "PDL": 1}
            if cfg not in configs and all(valid(gemv, cfg, m) for m in (1, 2, 4)):
                configs.append(cfg)
    # the params a table's config predates take the file's defaults (ZN's grouped configs predate ALIGN and PDL)
    grouped = [{**grouped_defaults, **c} for c in incumbents(table, GROUPED, ("9-16", "33-64"))]
    plan = {"deployment": {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 2, 4, 16, 64]},
            "variants": [{"file": GEMV, "slot": "moe_experts_shared", "language": "triton", "configs": configs,
                          "batch_sizes": [1, 2, 4]},
                         {"file": GROUPED, "slot": "moe_experts_shared", "language": "triton", "configs": grouped,
                          "batch_sizes": [16, 64]}]}
    out = Path(f"bench/plans/s25_{card}.json")
    out.write_text(json.dumps(plan, indent=1) + "\n")
    print(f"{out}: moe_experts_gemv x{len(configs)} at M = 1, 2, 4; moe_experts_grouped x{len(grouped)} at 16, 64")

# Call B on an H200 (short): o_proj's GEMV with the residual and the norm (oproj_residual_norm_gemv.py), which no H200
# has run, with the H100's three best configs at M = 1 and at M = 2 (its table h100-s24c's leaderboard), so that the
# H200 layer chains o_proj too and has the o_proj + norm kernel at M = 2 (ZN's table has none there).
ORN = "kernels/variants/triton/oproj_residual_norm_gemv.py"
h100 = json.loads(Path("bench/results/2026-12-06-h100-decode-tuning-h100-s24c.json").read_text())
items = []
for m in (1, 2):
    group = next(g for g in h100["leaderboard"] if g["slot"] == "oproj_residual_norm" and g["m"] == m)
    configs = []
    for e in group["entries"]:
        if h100["variant_files"].get(str(e["variant_id"])) == ORN and e["config"] not in configs:
            configs.append(e["config"])
    items.append({"file": ORN, "slot": "oproj_residual_norm", "language": "triton", "configs": configs,
                  "batch_sizes": [m]})
plan = {"deployment": {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 2]}, "variants": items}
Path("bench/plans/s25b_h200.json").write_text(json.dumps(plan, indent=1) + "\n")
print("bench/plans/s25b_h200.json: oproj_residual_norm_gemv " + ", ".join(
    f"x{len(i['configs'])} at M = {i['batch_sizes'][0]}" for i in items))
