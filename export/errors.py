"""Why an export did not happen: one exception listing every problem, so a caller fixes them all at once."""

from __future__ import annotations

from pydantic import BaseModel


class Problem(BaseModel):
    """One (slot, shape, batch bucket) that cannot be exported, and why."""

    slot: str
    shape_key: str
    bucket: str
    reason: str

    def line(self) -> str:
        return f"{self.slot} {self.shape_key} bucket {self.bucket}: {self.reason}"


class ExportError(Exception):
    """The export failed for a reason other than the evidence (build tool, file system)."""


class ExportRefused(ExportError):
    """The evidence does not support an export; ``problems`` lists each reason."""

    def __init__(self, summary: str, problems: list[Problem]):
        self.summary = summary
        self.problems = list(problems)
        lines = [summary] + [f"  - {p.line()}" for p in self.problems]
        super().__init__("\n".join(lines))
