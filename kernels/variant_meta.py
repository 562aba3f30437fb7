"""What a variant module declares (CONFIG_SPACE, CONSTRAINTS, USES_LIBRARY), read from its text
with ``ast`` — never by executing untrusted source in the caller's process."""

from __future__ import annotations

import ast
from typing import Any

DECLARED = ("CONFIG_SPACE", "CONSTRAINTS", "USES_LIBRARY", "CLAIMS")


def declared_literals(source: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in DECLARED:
                try:
                    found[name] = ast.literal_eval(node.value)
                except ValueError:
                    pass  # computed at import time: the submitter must pass it explicitly
    return found


def declared_space(source: str) -> dict[str, Any] | None:
    """The module's CONFIG_SPACE with its CONSTRAINTS folded in (the API's config_space format)."""
    lit = declared_literals(source)
    if "CONFIG_SPACE" not in lit:
        return None
    space = dict(lit["CONFIG_SPACE"])
    if lit.get("CONSTRAINTS"):
        space["constraints"] = list(lit["CONSTRAINTS"])
    return space
