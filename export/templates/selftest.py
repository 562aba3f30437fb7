"""Re-check every exported kernel on this machine: ``python -m <package>.selftest [--json]``.

Per tuned entry and per batch size its evidence covers: fresh random inputs (new seeds each run,
printed), outputs poisoned with NaN before the call, the result compared with a high-precision
reference (rel-L2 bound by dtype, no NaN/Inf); two trials on different inputs. Then the kernel and
the stock fallback are timed, interleaved, and the median speedup reported. Entries whose language
needs a GPU are skipped on a CPU-only machine. Exit status 1 when any entry fails.

``--every-m`` checks each entry at every batch size its bucket serves as well (dispatch runs the kernel a bucket's
measured M won at every M of that bucket: M = 5-7 with the kernel of M = 8), untimed: the evidence covers the measured
M only, and a kernel's masking can be right at M = 8 and wrong at M = 7.
"""

from __future__ import annotations

import importlib
import argparse
import json
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

# The package's __init__ re-exports the dispatch() function under the module's name: import the module.
dsp = importlib.import_module(".dispatch", __package__)
from . import reference

TRIALS = 2


@dataclass
class EntryReport:
    slot: str
    shape_key: str
    bucket: str
    module: str
    language: str
    status: str  # "pass" | "fail" | "skipped: ..."
    detail: str = ""
    seeds: list[int] = field(default_factory=list)
    rel_l2: float | None = None
    speedup_vs_stock: dict[str, float] = field(default_factory=dict)  # by M
    checked_ms: list[int] = field(default_factory=list)  # the M the entry passed at (timed or, with --every-m, not)
    chained: str | None = None  # "pass" when the chained build (dispatch's pdl=1) was checked too
    builds: dict[str, list[int]] = field(default_factory=dict)  # how each M's kernel was built ("aot", "jit: ...")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_us(fn: Any, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], device: torch.device) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn(**inputs, **outputs)
    _sync(device)
    return (time.perf_counter() - t0) * 1e6


GRAPH_CALLS = 32


def _graphed(fn: Any, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]) -> Any:
    """On a GPU, GRAPH_CALLS back-to-back calls captured in one CUDA graph and a replay timed with
    events (as vLLM runs decode: launch overhead out of the picture); the eager single call when the
    function cannot be captured (a stock path that syncs with the host)."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn(**inputs, **outputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(GRAPH_CALLS):
                fn(**inputs, **outputs)
        torch.cuda.synchronize()
    except Exception:
        torch.cuda.synchronize()
        return None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def replay_us() -> float:
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / GRAPH_CALLS
    return replay_us


def speedup(kernel: Any, stock: Any, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor],
            device: torch.device, rounds: int) -> float:
    """Median of stock/kernel over interleaved timings (warmed up), so drift hits both alike. Inputs
    stay the same across calls (warm caches): a sanity check on this machine, not the evidence (that
    is manifest.json's)."""
    for fn in (kernel, stock):
        fn(**inputs, **outputs)
    timers = []
    for fn in (kernel, stock):
        graphed = _graphed(fn, inputs, outputs) if device.type == "cuda" else None
        timers.append(graphed or (lambda fn=fn: _time_us(fn, inputs, outputs, device)))
    ratios = []
    for _ in range(rounds):
        k, s = timers[0](), timers[1]()
        ratios.append(s / max(k, 1e-3))
    return statistics.median(ratios)


def bucket_ms(bucket: str) -> list[int]:
    """Every M a bucket name ("5-8", "2") covers."""
    lo, _, hi = bucket.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def check_entry(entry: dict[str, Any], device: torch.device, rounds: int, every_m: bool = False) -> EntryReport:
    rep = EntryReport(entry["slot"], entry["shape_key"], entry["bucket"], entry["module"], entry["language"], "pass")
    if entry["language"] in dsp.GPU_LANGUAGES and device.type != "cuda":
        rep.status = f"skipped: needs {entry['language']} on a GPU"
        return rep
    sem = reference.semantics(entry["slot"])
    shape = dsp.dispatch_table()["slots"][entry["slot"]][entry["shape_key"]]["shape"]
    dims, dtype = shape["dims"], reference.DTYPES[shape["dtype"]]
    module = __import__(f"{__package__}.kernels.{entry['module']}", fromlist=["build"])
    # the chained build (dispatch's pdl=1) is checked as well where this machine can chain it
    chain = device.type == "cuda" and dsp.can_chain(module)
    worst = 0.0
    timed = set(entry["ms"])
    for m in sorted(timed | set(bucket_ms(entry["bucket"]) if every_m else ())):
        try:
            kernel, how = dsp.build_tuned(entry["slot"], entry["shape_key"], m)
        except Exception as exc:  # a build failure on this machine is this entry's failure, not the run's
            rep.status, rep.detail = "fail", f"M={m}: build raised {type(exc).__name__}: {exc}"
            return rep
        rep.builds.setdefault(how, []).append(m)
        previous: dict[str, torch.Tensor] | None = None
        for _ in range(TRIALS):
            failure, inputs, outputs, rel = _trial(kernel, "", sem, dims, dtype, m, device, rep)
            if failure:
                rep.status, rep.detail = "fail", failure
                return rep
            # New inputs must give new outputs: a kernel returning a cached answer fails here.
            if previous is not None and all(torch.equal(previous[k], outputs[k]) for k in outputs):
                rep.status, rep.detail = "fail", f"M={m}: identical outputs for different inputs"
                return rep
            previous = {k: v.clone() for k, v in outputs.items()}
            worst = max(worst, rel or 0.0)
        if chain:
            # Its weights are inputs here, and a chained kernel may read its weights before the kernel ahead of it
            # is done: _trial makes and syncs the inputs first (as a model's weights are long in place).
            try:
                chained, how = dsp.build_tuned(entry["slot"], entry["shape_key"], m, pdl=1)
            except Exception as exc:
                rep.status, rep.detail = "fail", f"M={m}: chained build raised {type(exc).__name__}: {exc}"
                return rep
            rep.builds.setdefault(f"chained {how}", []).append(m)
            failure, *_ = _trial(chained, "chained ", sem, dims, dtype, m, device, rep)
            if failure:
                rep.status, rep.detail = "fail", failure
                return rep
            rep.chained = "pass"
        rep.checked_ms.append(m)
        if m not in timed:
            continue
        stock = sem.stock(dsp.build_arg(entry["slot"], entry["shape_key"], m))
        rep.speedup_vs_stock[str(m)] = round(speedup(kernel, stock, inputs, outputs, device, rounds), 3)
    rep.rel_l2 = worst
    return rep


def _trial(kernel: Any, what: str, sem: Any, dims: dict[str, Any], dtype: torch.dtype, m: int, device: torch.device,
           rep: EntryReport) -> tuple[str | None, dict[str, torch.Tensor], dict[str, torch.Tensor], float | None]:
    """One call on fresh inputs (a new seed, recorded) into poisoned outputs, checked against the reference:
    (None, inputs, outputs, rel-L2) when it passes, else (why not, ...)."""
    seed = secrets.randbits(31)
    rep.seeds.append(seed)
    inputs = sem.make_inputs(dims, dtype, m, seed, device)
    outputs = sem.alloc_outputs(dims, dtype, m, device)
    reference.poison(outputs)
    try:
        _sync(device)
        kernel(**inputs, **outputs)
        _sync(device)
    except Exception as exc:
        return f"M={m} seed={seed}: {what}kernel raised {type(exc).__name__}: {exc}", inputs, outputs, None
    ok, reason, rel = sem.check(dims, dtype, outputs, sem.reference(dims, inputs))
    return (None if ok else f"M={m} seed={seed}: {what}{reason}"), inputs, outputs, rel


def run(rounds: int = 20, on_report: Callable[[EntryReport], None] | None = None,
        slots: list[str] | None = None, every_m: bool = False) -> list[EntryReport]:
    """Check every tuned entry (of ``slots`` only, when given; at every M of its bucket with ``every_m``);
    ``on_report`` sees each report as it is made (a long self-test cut short by a time limit still shows the
    entries it finished)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    reports = []
    for entry in dsp.tuned_entries():
        if slots and entry["slot"] not in slots:
            continue
        reports.append(check_entry(entry, device, rounds, every_m))
        if on_report is not None:
            on_report(reports[-1])
    return reports


def _ms(ms: list[int]) -> str:
    return f"{ms[0]}-{ms[-1]}" if len(ms) > 2 and ms == list(range(ms[0], ms[-1] + 1)) else ",".join(map(str, ms))


def _line(r: EntryReport) -> str:
    speed = ", ".join(f"M={m}: x{s}" for m, s in r.speedup_vs_stock.items())
    untimed = [m for m in r.checked_ms if str(m) not in r.speedup_vs_stock]
    return (f"{r.status.split(':')[0].upper():7} {r.slot} {r.shape_key} bucket {r.bucket} {r.module} "
            f"[{r.language}] {r.status if r.status.startswith('skipped') else r.detail} "
            f"{'rel_l2=%.2e ' % r.rel_l2 if r.rel_l2 is not None else ''}{speed}"
            f"{' chained: ' + r.chained if r.chained else ''}"
            f"{' built: ' + '; '.join(f'{how} at M={_ms(ms)}' for how, ms in r.builds.items()) if r.builds else ''}"
            f"{' also checked at M=' + ','.join(map(str, untimed)) if untimed else ''}").rstrip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__package__}.selftest", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON document instead of lines")
    ap.add_argument("--rounds", type=int, default=20, help="timed calls per implementation")
    # The MoE entries time a slow stock path: re-checking the slots a new table changed takes a fraction.
    ap.add_argument("--slot", action="append", dest="slots", metavar="SLOT",
                    help="check this slot's entries only (repeatable; default: every slot)")
    ap.add_argument("--every-m", action="store_true",
                    help="also check every other batch size each entry's bucket serves (untimed)")
    args = ap.parse_args(argv)
    known = {e["slot"] for e in dsp.tuned_entries()}
    unknown = sorted(set(args.slots or ()) - known)
    if unknown:
        ap.error(f"no tuned entries for {unknown}; this package has {sorted(known)}")
    mismatch = dsp.hardware_mismatch()
    if args.json:
        reports = run(args.rounds, slots=args.slots, every_m=args.every_m)
        failed = [r for r in reports if r.status == "fail"]
        print(json.dumps({"hardware": dsp.local_hardware(), "hardware_mismatch": mismatch,
                          "entries": [asdict(r) for r in reports], "failed": len(failed)}, indent=1))
    else:
        if mismatch:
            print(f"note: {mismatch}; dispatch() will use the stock kernels here", flush=True)
        reports = run(args.rounds, on_report=lambda r: print(_line(r), flush=True), slots=args.slots,
                      every_m=args.every_m)
        failed = [r for r in reports if r.status == "fail"]
        print(f"{len(reports) - len(failed)} of {len(reports)} entries passed or skipped; {len(failed)} failed")
    return 1 if failed or not reports else 0


if __name__ == "__main__":
    sys.exit(main())
