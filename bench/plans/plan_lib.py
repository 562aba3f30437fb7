"""What the make_s*.py plan writers share: the session's deployment, its shapes as the service derives them, each
variant file's space as the service reads it, and a config completed and checked as the service would check it."""

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels.catalogue import all_slots  # noqa: E402
from kernels.deployment import Deployment  # noqa: E402
from kernels.variant_meta import declared_space  # noqa: E402
from search.space import ConfigSpace  # noqa: E402

GROUPED = "kernels/variants/triton/moe_experts_grouped.py"
# moe_experts_grouped's config that holds moe_experts' 9-64 buckets on both cards (and moe_experts_shared's on the H200):
# the base the grouped plans change one parameter of at a time
GROUPED_INCUMBENT = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 2, "num_warps": 4, "num_stages": 3,
                     "COMBINE": "grouped", "BLOCK_N2": 128, "BLOCK_K2": 128, "num_warps2": 4, "num_stages2": 2,
                     "ALIGN": "sort", "PDL": 0}
DEPLOYMENT = {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 2, 4, 16, 64]}
# shape name -> the shape, as the service derives it for this deployment
SHAPES = {shape.name: shape for slot in all_slots().values() for shape in slot.shapes(Deployment(**DEPLOYMENT))}


@functools.cache  # read once per file, not once per config
def file_space(file: str) -> ConfigSpace:
    """The file's CONFIG_SPACE and CONSTRAINTS as the service reads them (from the text: a CuTe file needs CuTe DSL
    to import)."""
    return ConfigSpace.parse(declared_space(Path(file).read_text()))


def filled(file: str, config: dict) -> dict:
    """config with its space's first value for the params it predates (the kernel it ran before they existed:
    the ring's KSPLIT 1 and ROTATE 0), in CONFIG_SPACE order."""
    return {k: config.get(k, values[0]) for k, values in file_space(file).params.items()}


def runs_at(file: str, cfg: dict, shape: str, m: int) -> bool:
    """Whether the service would run this full config at (shape, M): every value in the space, every constraint met."""
    return file_space(file).is_valid(cfg, SHAPES[shape].as_build_arg(m))


def complete(file: str, config: dict, shape: str, m: int) -> dict | None:
    """filled(file, config), or None where the service would not run it at (shape, M)."""
    cfg = filled(file, config)
    return cfg if runs_at(file, cfg, shape, m) else None


def check(plan: dict) -> int:
    """The plan's run count; every config in its file's CONFIG_SPACE order."""
    runs = 0
    for item in plan["variants"]:
        space = file_space(item["file"])
        ms = item.get("batch_sizes", plan["deployment"]["batch_sizes"])
        if "configs" not in item:  # all of the space: its valid points at each M
            shapes = [s for s in SHAPES.values() if s.slot == item["slot"]]
            runs += sum(space.count(s.as_build_arg(m)) for s in shapes for m in ms)
            continue
        for cfg in item["configs"]:
            assert list(cfg) == list(space.params), (item["file"], cfg)
        runs += len(item["configs"]) * len(ms) * len(item.get("shapes", [None]))
    return runs
