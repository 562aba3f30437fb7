"""The config-space language a variant is submitted with, JSON in and out.

    {"BLOCK_N": [32, 64, 128],                      # a non-empty list of values (int, float, str, bool)
     "SPLIT_K": {"pow2": [1, 16]},                  # powers of two, both ends included
     "num_warps": {"range": [2, 8], "step": 2},     # integer range, both ends included
     "constraints": ["BLOCK_K * SPLIT_K <= K", "BLOCK_N <= N"]}

Constraints are Python expressions over parameter names, the shape's dims (N, K, M, E, ...) and the
device limits passed in (e.g. ``SMEM_LIMIT``). They are parsed with ``ast`` and evaluated by a tiny
evaluator that knows names, numbers, + - * / // % **, comparisons, and/or/not, min/max and nothing
else: a submitted space is untrusted text and must never reach ``eval``.
"""

from __future__ import annotations

import ast
import json
import math
import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

Value = int | float | str | bool
Config = dict[str, Value]

DEFAULT_MAX_SIZE = 1_000_000
RESERVED_KEYS = frozenset({"constraints"})
# ** with a huge exponent would let a submitted constraint burn a worker's CPU.
MAX_POW_EXPONENT = 64


class SpaceError(ValueError):
    """A config space (or a config against it) is malformed; the message names the offending text."""


_BIN_OPS: dict[type[ast.operator], Any] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_CMP_OPS: dict[type[ast.cmpop], Any] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_UNARY_OPS: dict[type[ast.unaryop], Any] = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_FUNCS: dict[str, Any] = {"min": min, "max": max}


@dataclass(frozen=True)
class Constraint:
    """One parsed constraint: its source text, its checked AST and the names it reads."""

    text: str
    tree: ast.Expression
    names: frozenset[str]

    @classmethod
    def parse(cls, text: Any) -> "Constraint":
        if not isinstance(text, str) or not text.strip():
            raise SpaceError(f"constraint must be a non-empty string, got {text!r}")
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise SpaceError(f"constraint {text!r} is not an expression: {exc.msg}") from None
        names: set[str] = set()
        call_funcs = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            _check_node(node, text, names, call_funcs)
        return cls(text=text, tree=tree, names=frozenset(names))

    def evaluate(self, env: Mapping[str, Any]) -> bool:
        try:
            return bool(_eval(self.tree.body, env, self.text))
        except SpaceError:
            raise
        except (ArithmeticError, TypeError, ValueError) as exc:
            raise SpaceError(f"constraint {self.text!r} failed to evaluate with "
                             f"{ {n: env.get(n) for n in sorted(self.names)} }: {exc}") from None


def _check_node(node: ast.AST, text: str, names: set[str], call_funcs: set[int]) -> None:
    allowed = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Name,
               ast.Load, ast.Constant, ast.Call, *_BIN_OPS, *_CMP_OPS, *_UNARY_OPS)
    if not isinstance(node, allowed):
        raise SpaceError(f"constraint {text!r}: {type(node).__name__} is not allowed "
                         f"(only names, numbers, + - * / // % **, comparisons, and/or/not, min/max)")
    if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str)):
        raise SpaceError(f"constraint {text!r}: constant {node.value!r} is not allowed")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords or not node.args:
            raise SpaceError(f"constraint {text!r}: only min(...) and max(...) calls are allowed, got "
                             f"{ast.unparse(node)!r}")
    elif isinstance(node, ast.Name):
        if node.id in _FUNCS and id(node) not in call_funcs:
            raise SpaceError(f"constraint {text!r}: {node.id!r} may only be called")
        if id(node) not in call_funcs:
            names.add(node.id)


def _eval(node: ast.AST, env: Mapping[str, Any], text: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise SpaceError(f"constraint {text!r}: unknown name {node.id!r}")
        return env[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env, text), _eval(node.right, env, text)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > MAX_POW_EXPONENT:
            raise SpaceError(f"constraint {text!r}: exponent {right} exceeds {MAX_POW_EXPONENT}")
        return _BIN_OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        return _UNARY_OPS[type(node.op)](_eval(node.operand, env, text))
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(v, env, text) for v in node.values)
        return any(_eval(v, env, text) for v in node.values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, text)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env, text)
            if not _CMP_OPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        return _FUNCS[node.func.id](*(_eval(a, env, text) for a in node.args))
    raise SpaceError(f"constraint {text!r}: {type(node).__name__} is not allowed")


def _parse_param(name: str, spec: Any) -> tuple[Value, ...]:
    """The ordered domain of one parameter."""
    if isinstance(spec, list):
        if not spec:
            raise SpaceError(f"parameter {name!r}: empty list of values")
        for v in spec:
            if not isinstance(v, (int, float, str, bool)) or (isinstance(v, float) and not math.isfinite(v)):
                raise SpaceError(f"parameter {name!r}: value {v!r} is not an int, finite float, string or bool")
        keys = [json.dumps(v) for v in spec]
        if len(set(keys)) != len(keys):
            dupes = sorted({k for k in keys if keys.count(k) > 1})
            raise SpaceError(f"parameter {name!r}: duplicate values {dupes}")
        return tuple(spec)
    if isinstance(spec, dict) and set(spec) <= {"range", "step"} and "range" in spec:
        bounds, step = spec["range"], spec.get("step", 1)
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(_is_int(b) for b in bounds)):
            raise SpaceError(f"parameter {name!r}: range must be [lo, hi] of integers, got {bounds!r}")
        if not _is_int(step) or step <= 0:
            raise SpaceError(f"parameter {name!r}: step must be a positive integer, got {step!r}")
        lo, hi = bounds
        if lo > hi:
            raise SpaceError(f"parameter {name!r}: empty range [{lo}, {hi}]")
        return tuple(range(lo, hi + 1, step))
    if isinstance(spec, dict) and set(spec) == {"pow2"}:
        bounds = spec["pow2"]
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(_is_int(b) and b >= 1 for b in bounds)):
            raise SpaceError(f"parameter {name!r}: pow2 must be [lo, hi] of positive integers, got {bounds!r}")
        lo, hi = bounds
        for b in (lo, hi):
            if b & (b - 1):
                raise SpaceError(f"parameter {name!r}: pow2 bound {b} is not a power of two")
        if lo > hi:
            raise SpaceError(f"parameter {name!r}: empty pow2 range [{lo}, {hi}]")
        return tuple(1 << e for e in range(lo.bit_length() - 1, hi.bit_length()))
    raise SpaceError(f"parameter {name!r}: expected a list of values, {{'range': [lo, hi], 'step': s}} or "
                     f"{{'pow2': [lo, hi]}}, got {spec!r}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class ConfigSpace:
    """A parsed config space. Enumeration order is deterministic: parameters in the order submitted,
    values in their listed (or ascending) order, the last parameter varying fastest."""

    def __init__(self, params: dict[str, tuple[Value, ...]], constraints: list[Constraint],
                 source: dict[str, Any]) -> None:
        self.params = params
        self.constraints = constraints
        self._source = source
        order = {name: i for i, name in enumerate(params)}
        # Each constraint is checked at the first depth where all of its parameters are bound, so
        # enumeration prunes whole subtrees instead of testing every raw point.
        self._checks_at_depth: list[list[Constraint]] = [[] for _ in params]
        self._param_free: list[Constraint] = []
        for c in constraints:
            depths = [order[n] for n in c.names if n in order]
            if depths:
                self._checks_at_depth[max(depths)].append(c)
            else:
                self._param_free.append(c)

    @classmethod
    def parse(cls, data: str | Mapping[str, Any], *, max_size: int = DEFAULT_MAX_SIZE) -> "ConfigSpace":
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as exc:
                raise SpaceError(f"config space is not valid JSON: {exc}") from None
        if not isinstance(data, Mapping):
            raise SpaceError(f"config space must be a JSON object, got {type(data).__name__}")
        params: dict[str, tuple[Value, ...]] = {}
        for name, spec in data.items():
            if name in RESERVED_KEYS:
                continue
            if not isinstance(name, str) or not name.isidentifier() or name in _FUNCS:
                raise SpaceError(f"parameter name {name!r} must be a Python identifier (and not min/max)")
            params[name] = _parse_param(name, spec)
        if not params:
            raise SpaceError("config space has no parameters")
        raw_constraints = data.get("constraints", [])
        if not isinstance(raw_constraints, list):
            raise SpaceError(f"constraints must be a list of strings, got {raw_constraints!r}")
        constraints = [Constraint.parse(t) for t in raw_constraints]
        space = cls(params, constraints, json.loads(json.dumps(dict(data))))
        if space.size() > max_size:
            dims = " x ".join(f"{n}:{len(v)}" for n, v in params.items())
            raise SpaceError(f"config space has {space.size()} raw points ({dims}), more than the limit of "
                             f"{max_size}; narrow the ranges or split the variant")
        return space

    def to_json(self) -> dict[str, Any]:
        """The space as submitted (ranges and pow2 stay compact)."""
        return json.loads(json.dumps(self._source))

    def size(self) -> int:
        """Raw number of points, constraints ignored."""
        return math.prod(len(v) for v in self.params.values())

    @staticmethod
    def canonical(config: Mapping[str, Any]) -> str:
        """A stable key for a config: sorted keys, no whitespace."""
        return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))

    def _base_env(self, shape: Mapping[str, Any], limits: Mapping[str, Any] | None) -> dict[str, Any]:
        env: dict[str, Any] = {}
        for source_name, names in (("shape", shape), ("device limits", limits or {})):
            for n, v in names.items():
                if n in self.params:
                    raise SpaceError(f"parameter {n!r} clashes with a name of the {source_name}")
                env[n] = v
        known = set(env) | set(self.params)
        for c in self.constraints:
            unknown = sorted(c.names - known)
            if unknown:
                raise SpaceError(f"constraint {c.text!r}: unknown name(s) {unknown}; known: parameters "
                                 f"{sorted(self.params)}, shape {sorted(shape)}, limits {sorted(limits or {})}")
        return env

    def check_names(self, shape: Mapping[str, Any], limits: Mapping[str, Any] | None = None) -> None:
        """Raise SpaceError if a constraint reads a name neither a parameter, a shape dim nor a limit."""
        self._base_env(shape, limits)

    def points(self, shape: Mapping[str, Any], limits: Mapping[str, Any] | None = None) -> Iterator[Config]:
        """Every valid config, lazily, in the deterministic enumeration order."""
        env = self._base_env(shape, limits)
        if not all(c.evaluate(env) for c in self._param_free):
            return
        names = list(self.params)
        domains = [self.params[n] for n in names]
        yield from self._walk(0, names, domains, env)

    def _walk(self, depth: int, names: list[str], domains: list[tuple[Value, ...]],
              env: dict[str, Any]) -> Iterator[Config]:
        name, checks = names[depth], self._checks_at_depth[depth]
        last = depth == len(names) - 1
        for value in domains[depth]:
            env[name] = value
            if all(c.evaluate(env) for c in checks):
                if last:
                    yield {n: env[n] for n in names}
                else:
                    yield from self._walk(depth + 1, names, domains, env)
        del env[name]

    def count(self, shape: Mapping[str, Any], limits: Mapping[str, Any] | None = None) -> int:
        return sum(1 for _ in self.points(shape, limits))

    def is_valid(self, config: Mapping[str, Any], shape: Mapping[str, Any],
                 limits: Mapping[str, Any] | None = None) -> bool:
        """In the domain of every parameter (no missing or extra keys) and satisfying every constraint."""
        if set(config) != set(self.params):
            return False
        for n, v in config.items():
            # Compare by JSON text so True is not mistaken for 1 nor 2 for 2.0.
            if json.dumps(v) not in {json.dumps(d) for d in self.params[n]}:
                return False
        env = self._base_env(shape, limits)
        env.update(config)
        return all(c.evaluate(env) for c in self.constraints)

    def describe(self) -> str:
        parts = [f"{n}={list(v)}" for n, v in self.params.items()]
        return ", ".join(parts) + (f"; constraints: {[c.text for c in self.constraints]}" if self.constraints else "")
