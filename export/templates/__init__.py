"""Tuned decode kernels exported by kerneltune: a vLLM ``latency_specialized`` backend.

``dispatch(slot, shape_key, M)`` returns the kernel for one step (tuned or the stock fallback; ``pdl=1`` a kernel
that fetches its weights while the kernel before it runs, where ``chainable(explain(...))``);
``manifest()`` holds the provenance and evidence; ``python -m <this package>.selftest`` re-checks
every kernel on the machine it runs on; the ``vllm.general_plugins`` entry point is ``plugin.register``.
"""

from .dispatch import Choice, chainable, dispatch, explain, manifest, stock, tuned_entries

__all__ = ["Choice", "chainable", "dispatch", "explain", "manifest", "stock", "tuned_entries"]
