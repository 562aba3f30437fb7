"""Export winners as an installable vLLM ``latency_specialized`` backend wheel.

The REST route and the CLI call ``export_package(session, hardware=..., model=..., out_dir=...)``.
"""

from export.builder import ExportResult, export_package
from export.errors import ExportError, ExportRefused, Problem

__all__ = ["ExportError", "ExportRefused", "ExportResult", "Problem", "export_package"]
