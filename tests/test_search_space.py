"""The config-space language: parsing, errors, counting, the safe constraint evaluator."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest

from search.space import ConfigSpace, SpaceError

SHAPE = {"N": 2112, "K": 7168, "M": 8}


def test_parses_lists_ranges_and_pow2_in_order() -> None:
    space = ConfigSpace.parse({"BLOCK_N": [32, 64, 128], "SPLIT_K": {"pow2": [1, 16]},
                               "num_warps": {"range": [2, 8], "step": 2}, "layout": ["row", "col"],
                               "swizzle": [True, False], "ratio": [0.5, 1.5]})
    assert space.params["SPLIT_K"] == (1, 2, 4, 8, 16)
    assert space.params["num_warps"] == (2, 4, 6, 8)
    assert space.size() == 3 * 5 * 4 * 2 * 2 * 2
    assert space.count(SHAPE) == space.size()
    first = next(space.points(SHAPE))
    assert first == {"BLOCK_N": 32, "SPLIT_K": 1, "num_warps": 2, "layout": "row", "swizzle": True, "ratio": 0.5}


def test_json_round_trip_keeps_the_submitted_form() -> None:
    text = json.dumps({"BLOCK_K": {"pow2": [16, 256]}, "constraints": ["BLOCK_K <= K"]})
    space = ConfigSpace.parse(text)
    again = ConfigSpace.parse(space.to_json())
    assert again.to_json() == json.loads(text)
    assert list(again.points(SHAPE)) == list(space.points(SHAPE))


def test_constraints_filter_points_and_read_shape_and_limits() -> None:
    space = ConfigSpace.parse({
        "BLOCK_N": [32, 64, 128], "BLOCK_K": [64, 128, 256], "SPLIT_K": {"pow2": [1, 8]}, "num_stages": [2, 3, 4],
        "constraints": ["BLOCK_K * SPLIT_K <= K", "BLOCK_N <= N",
                        "(BLOCK_N + M) * BLOCK_K * 2 * num_stages <= SMEM_LIMIT"]})
    shape = {"N": 64, "K": 512, "M": 16}
    limits = {"SMEM_LIMIT": 100_000}
    expected = [dict(zip(("BLOCK_N", "BLOCK_K", "SPLIT_K", "num_stages"), v))
                for v in itertools.product([32, 64, 128], [64, 128, 256], [1, 2, 4, 8], [2, 3, 4])
                if v[1] * v[2] <= 512 and v[0] <= 64 and (v[0] + 16) * v[1] * 2 * v[3] <= 100_000]
    assert list(space.points(shape, limits)) == expected
    assert space.count(shape, limits) == len(expected) < space.size()
    assert space.is_valid({"BLOCK_N": 64, "BLOCK_K": 64, "SPLIT_K": 8, "num_stages": 2}, shape, limits)
    assert not space.is_valid({"BLOCK_N": 128, "BLOCK_K": 64, "SPLIT_K": 1, "num_stages": 2}, shape, limits)
    assert not space.is_valid({"BLOCK_N": 64, "BLOCK_K": 64, "SPLIT_K": 1}, shape, limits)  # missing key
    assert not space.is_valid({"BLOCK_N": 48, "BLOCK_K": 64, "SPLIT_K": 1, "num_stages": 2}, shape, limits)


def test_min_max_and_boolean_logic() -> None:
    space = ConfigSpace.parse({"a": [1, 2, 3, 4], "b": [1, 2, 3, 4],
                               "constraints": ["max(a, b) - min(a, b) == 1 or not (a < 3)", "a ** 2 // b % 5 >= 0"]})
    got = list(space.points({}))
    assert got == [{"a": a, "b": b} for a in range(1, 5) for b in range(1, 5) if abs(a - b) == 1 or a >= 3]


def test_canonical_is_stable_across_key_order() -> None:
    assert ConfigSpace.canonical({"b": 1, "a": "x"}) == ConfigSpace.canonical({"a": "x", "b": 1}) == '{"a":"x","b":1}'


@pytest.mark.parametrize("spec, message", [
    ({"BLOCK_N": []}, "empty list"),
    ({"BLOCK_N": [32, 32]}, "duplicate"),
    ({"BLOCK_N": [[1, 2]]}, "not an int"),
    ({"BLOCK_N": {"range": [8, 2]}}, "empty range"),
    ({"BLOCK_N": {"range": [1, 8], "step": 0}}, "step"),
    ({"BLOCK_N": {"range": [1.5, 8]}}, "integers"),
    ({"BLOCK_N": {"pow2": [3, 16]}}, "not a power of two"),
    ({"BLOCK_N": {"linspace": [1, 2]}}, "expected a list"),
    ({"constraints": ["1 < 2"]}, "no parameters"),
    ({"a": [1], "constraints": "a < 2"}, "list of strings"),
    ({"a": [1], "constraints": ["a <"]}, "not an expression"),
    ({"a": [1], "constraints": ["__import__('os').system('true')"]}, "only min(...) and max(...)"),
    ({"a": [1], "constraints": ["a.real > 0"]}, "Attribute is not allowed"),
    ({"a": [1], "constraints": ["[a][0] > 0"]}, "not allowed"),
    ({"a": [1], "constraints": ["(lambda: 1)() > 0"]}, "only min(...) and max(...)"),
    ({"a": [1], "constraints": ["a if a else 0"]}, "IfExp is not allowed"),
    ({"a": [1], "constraints": ["min > 0"]}, "may only be called"),
    ({"a": [1], "constraints": ["max(a, key=abs) > 0"]}, "only min(...) and max(...)"),
    ({"a": [1], "constraints": ["a is None"]}, "not allowed"),
    ({"a": list(range(1000)), "b": list(range(1001))}, "more than the limit"),
    ("{not json", "not valid JSON"),
])
def test_malformed_spaces_are_refused_with_the_offending_text(spec: object, message: str) -> None:
    with pytest.raises(SpaceError, match=re.escape(message)):
        ConfigSpace.parse(spec)  # type: ignore[arg-type]


def test_unknown_constraint_name_is_an_error_naming_it() -> None:
    space = ConfigSpace.parse({"BLOCK_N": [32], "constraints": ["BLOCK_N <= NN"]})
    with pytest.raises(SpaceError, match=r"BLOCK_N <= NN.*'NN'"):
        space.count({"N": 64})
    with pytest.raises(SpaceError, match="clashes"):
        ConfigSpace.parse({"N": [32]}).count({"N": 64})


def test_runtime_errors_in_constraints_become_space_errors() -> None:
    space = ConfigSpace.parse({"a": [0, 1], "constraints": ["K % a == 0"]})
    with pytest.raises(SpaceError, match="K % a == 0"):
        space.count({"K": 8})
    with pytest.raises(SpaceError, match="exponent"):
        ConfigSpace.parse({"a": [2], "constraints": ["a ** 100000 > 0"]}).count({})


def _random_space(rng: random.Random) -> tuple[dict, dict]:
    spec: dict = {}
    names = [f"p{i}" for i in range(rng.randint(1, 4))]
    for name in names:
        kind = rng.choice(["list", "range", "pow2"])
        if kind == "list":
            spec[name] = rng.sample(range(1, 50), rng.randint(1, 5))
        elif kind == "range":
            lo = rng.randint(0, 10)
            spec[name] = {"range": [lo, lo + rng.randint(0, 12)], "step": rng.randint(1, 3)}
        else:
            lo = rng.randint(0, 3)
            spec[name] = {"pow2": [2 ** lo, 2 ** (lo + rng.randint(0, 4))]}
    ops = ["<=", "<", ">=", "!=", "=="]
    spec["constraints"] = [f"{rng.choice(names)} * {rng.randint(1, 3)} {rng.choice(ops)} {rng.choice(names)} + X"
                           for _ in range(rng.randint(0, 3))]
    return spec, {"X": rng.randint(0, 20)}


def test_property_points_equal_brute_force_filter_over_random_spaces() -> None:
    """Enumeration with early pruning must give exactly the brute-force filtered product, in order."""
    rng = random.Random(1234)
    for _ in range(150):
        spec, shape = _random_space(rng)
        space = ConfigSpace.parse(spec)
        names = list(space.params)
        brute = []
        for values in itertools.product(*(space.params[n] for n in names)):
            env = {**shape, **dict(zip(names, values))}
            if all(eval(c, {"__builtins__": {}}, env) for c in spec["constraints"]):  # trusted test text
                brute.append(dict(zip(names, values)))
        points = list(space.points(shape))
        assert points == brute, spec
        assert space.count(shape) == len(brute)
        assert all(space.is_valid(p, shape) for p in points)
        assert len({space.canonical(p) for p in points}) == len(points)


def test_every_shipped_variant_space_fits_the_service_limit() -> None:
    """A shipped variant the API refuses to take is a broken product (seen on the H200: the MoE
    variant's space was 139,968 raw points against the 100,000 cap)."""
    from pathlib import Path

    from kernels.variant_meta import declared_space
    from service.settings import Settings

    cap = Settings.model_fields["max_config_points"].default
    shipped = sorted((Path(__file__).resolve().parents[1] / "kernels" / "variants").glob("*/*.py"))
    assert shipped
    for path in shipped:
        space = declared_space(path.read_text())
        if space:
            ConfigSpace.parse(space, max_size=cap)  # raises SpaceError over the cap
