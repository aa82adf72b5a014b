"""What the grid benchmarks (bench_fwd.py, bench_bwd.py, bench_fwd_fp8.py) share, and the house
helpers the other benchmarks import: the result header, design §5's FLOP count, the peers built
for the GPU machine (folders named by environment variables: FlashAttention-3 by HFA_FA3_DIR,
FlashMLA by bench_mla.py's HFA_FLASHMLA_DIR), the timings (do_bench's; CUDA events with the
host's launch kept out, for calls as short as decode's; the wall clock's for CPU smoke runs), the
timing of a cell's implementations in two opposite orders, the per-cell error handling of the
main loop, and the JSON / markdown / PNG writers.

torch, triton and matplotlib are imported inside the functions that need them, so that
`--help` and the writers work on a machine without them.
"""

import argparse
import contextlib
import datetime
import functools
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The checkout's package first, so that a benchmark measures the tree it sits in.
sys.path.insert(0, os.path.join(REPO, "python"))

# Case keys that vary inside one measured cell (bench_bwd.py's "bwd" and "fwdbwd" rows read the
# same gradients): one accuracy entry covers every value of them.
VARIANT_KEYS = ("mode",)
# Design §5's grid.
GRID_HDIMS = [64, 128, 256]
GRID_SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]


def git_commit():
    """HFA_COMMIT when set: the commit the binaries were built from. The GPU machine's copy of
    the repository carries the working tree but not always the newest .git, so its own
    `git rev-parse` can name an older commit (then marked -dirty)."""
    if os.environ.get("HFA_COMMIT"):
        return os.environ["HFA_COMMIT"]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def flops(batch, heads, seqlen_q, seqlen_k, d_qk, d_v, causal):
    """Design §5: 4·b·h·s_q·s_k·d (d: mean of the head dims), halved for causal at s_q = s_k."""
    f = 4.0 * batch * heads * seqlen_q * seqlen_k * (d_qk + d_v) / 2
    return f / 2 if causal and seqlen_q == seqlen_k else f


# --- FlashAttention-3 ---------------------------------------------------------------------------
# The peer hfa is modelled on. It does not come with PyTorch: the GPU machine has it as a folder
# (flash_attn_interface.py beside the flash_attn_3 package and its compiled library), which
# HFA_FA3_DIR names. Its implementations in the benchmarks: "fa3" (and bench_bwd.py's "fa3_det").

FA3_DIR_VARIABLE = "HFA_FA3_DIR"


def is_fa3(impl):
    return impl == "fa3" or impl.startswith("fa3_")


def default_impls(impls):
    """A benchmark's default --impls: FlashAttention-3's only where HFA_FA3_DIR is set, so that a
    run without it measures what it did before (asked for by name, they record why not)."""
    return [i for i in impls if not is_fa3(i) or os.environ.get(FA3_DIR_VARIABLE)]


def peer_module(variable, module, folder):
    """(a peer's module, None), or (None, why it cannot be used): the folder the environment
    variable `variable` names (`folder` says what it holds) goes first on sys.path and `module`
    is imported from it. The peers are folders built for the GPU machine (../shared/peers/)."""
    path = os.environ.get(variable)
    if not path:
        return None, f"not available: {variable} is not set ({folder})"
    path = os.path.abspath(path)
    sys.path.insert(0, path)
    try:
        imported = __import__(module)
    except Exception as e:  # noqa: BLE001 - ImportError, OSError of its library, a torch error
        # The folder by its variable's name: the reason goes into result files.
        why = first_line(e).replace(path, "$" + variable)
        return None, (f"not available: import {module} from {variable} "
                      f"failed: {type(e).__name__}: {why}")
    return imported, None


def peer_for_run(result, wanted, load, version_key, package):
    """The peer's module for a run of the implementations `wanted` (those of the run that are
    this peer's), or None: where there are none, or load() (-> peer_module's pair) fails, and
    then each of them gets one skip entry for the whole run (case {"cells": "all"}), its cells
    null. Where it loads, the version of its package `package` joins the result's versions
    under `version_key`."""
    if not wanted:
        return None
    module, why = load()
    if module is None:
        result["skipped"] += [{"case": {"cells": "all"}, "impl": i, "reason": why} for i in wanted]
        print(f"bench: {', '.join(wanted)}: {why}", flush=True)
    else:
        result["versions"][version_key] = getattr(sys.modules.get(package), "__version__",
                                                  "unknown")
    return module


@functools.cache
def fa3_interface():
    """(FlashAttention-3's flash_attn_interface module, None), or (None, why it cannot be used):
    from the folder HFA_FA3_DIR names, imported once."""
    return peer_module(FA3_DIR_VARIABLE, "flash_attn_interface", "FlashAttention-3's folder")


def fa3_for_run(result, impls):
    """FlashAttention-3's module for a run of the implementations `impls`, or None: where none of
    them is FA3's, or it does not load (peer_for_run: a skip entry for each FA3 implementation
    asked for)."""
    return peer_for_run(result, [i for i in impls if is_fa3(i)], fa3_interface, "fa3",
                        "flash_attn_3")


def fa3_forward(fa3, q, k, v, causal, **descales):
    """(out, lse) of FlashAttention-3's forward on BSHD q, k, v (k, v may have fewer heads: GQA),
    its op without autograd, softmax scale 1/sqrt(hdim). FP8: e4m3 q, k, v and q_descale,
    k_descale, v_descale float32 (batch, heads_kv); out is bf16 then."""
    out, lse, *_ = fa3._flash_attn_forward(q, k, v, softmax_scale=q.shape[-1] ** -0.5,
                                           causal=causal, **descales)
    return out, lse


# --- running ----------------------------------------------------------------------------------

class nan_filled_empty:
    """torch.empty returns NaN-filled memory inside this block (deterministic mode fills
    uninitialized memory), so outputs hfa allocates start as NaN (design §6)."""

    def __enter__(self):
        import torch
        self.prev = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
        torch.use_deterministic_algorithms(True, warn_only=True)
        return self

    def __exit__(self, *exc):
        import torch
        torch.use_deterministic_algorithms(self.prev[0], warn_only=self.prev[1])
        return False


def under(backend):
    """The SDPA backend context for a peer; nothing for hfa (backend None)."""
    if backend is None:
        return contextlib.nullcontext()
    from torch.nn.attention import sdpa_kernel
    return sdpa_kernel(backend)


def first_line(e):
    return (str(e).splitlines() or [""])[0]


def skip_reason(e):
    """Why an implementation cannot run a cell, from what its first call raised."""
    if isinstance(e, NotImplementedError):  # hfa: not supported by this build or device
        return f"not implemented: {e}"
    # SDPA: no kernel for this shape; hfa: CUDA or internal error.
    return f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}"


class GpuState:
    """The SM clock and the board's power while a block of GPU work runs: NVML read every 5 ms
    from a thread, averaged (None where NVML cannot be read). Why it is recorded beside every
    timing: the H200 draws its 700 W limit within a few hundred milliseconds of sustained
    attention and then lowers its clock, 1980 MHz to 1500-1750 (docs/decisions/030),
    so one cell's speed moved by a quarter with what ran before it, and a ratio of two
    implementations is a ratio of kernels only where both ran at the same clock. NVML's power
    is a one-second average and lags; the clock is the reading to use."""

    def __init__(self):
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nv, self._handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - the state is a note beside the time, not a requirement
            self._nv = None
        self.sm_mhz = self.watts = None

    def _read(self):
        return (self._nv.nvmlDeviceGetClockInfo(self._handle, self._nv.NVML_CLOCK_SM),
                self._nv.nvmlDeviceGetPowerUsage(self._handle) / 1000.0)

    def __enter__(self):
        import threading
        self._samples, self._stop = [], threading.Event()
        if self._nv is not None:
            def sample():
                while not self._stop.wait(0.005):
                    self._samples.append(self._read())
            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._nv is not None:
            self._thread.join()
        if self._samples:
            self.sm_mhz = round(sum(c for c, _ in self._samples) / len(self._samples))
            self.watts = round(sum(w for _, w in self._samples) / len(self._samples), 1)
        return False

    def as_dict(self):
        return {"sm_mhz": self.sm_mhz, "watts": self.watts}


def timed_ms(fn, args):
    """do_bench's median ms of fn (args.warmup, args.rep) and the GPU's state meanwhile
    (GpuState.as_dict). With args.cool > 0 the GPU first idles that many seconds, so that the
    timing starts below the power limit and, if short, ends there too (1 s and --rep 50 held
    1980 MHz in nearly every cell of the cool grids of docs/decisions/030): the kernels' speed at
    the full clock. Without it a cell runs in whatever state the cells before left: at long
    sequences the power-limited speed that sustained work sees."""
    import torch
    import triton.testing
    if getattr(args, "cool", 0) > 0:
        torch.cuda.synchronize()
        time.sleep(args.cool)
    with GpuState() as state:
        ms = triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep, return_mode="median")
    return ms, state.as_dict()


def in_both_orders(timings):
    """Runs every timing of `timings` (name -> a function that times one implementation and
    returns (value, GPU state), e.g. do_bench_timing's) twice: in the order given, then in the
    reverse order. Returns name -> [round 1's (value, state), round 2's]. Why: the H200 reaches
    its 700 W limit within a few hundred milliseconds of sustained attention and lowers its
    clock (GpuState), so what ran just before sets an implementation's clock; in two opposite
    orders each implementation runs once early and once late, and the mean of its two rounds
    carries the same drift as every other's."""
    measured = {name: [] for name in timings}
    for order in (list(timings), list(reversed(timings))):
        for name in order:
            measured[name].append(timings[name]())
    return measured


def do_bench_timing(args, backend, fn):
    """A timing for in_both_orders: timed_ms of fn under the SDPA backend `backend` (None: no
    backend context, for hfa and FlashAttention-3)."""
    def timing():
        with under(backend):
            return timed_ms(fn, args)
    return timing


def wall_clock_ms(fn, args):
    """The smoke paths' timing (--device cpu; do_bench times CUDA events): median wall-clock ms
    of fn() over args.rep ms of calls (at least 3) after args.warmup ms (at least one call).
    No GPU state to record."""
    deadline = time.perf_counter() + args.warmup / 1e3
    fn()
    while time.perf_counter() < deadline:
        fn()
    times, deadline = [], time.perf_counter() + args.rep / 1e3
    while len(times) < 3 or time.perf_counter() < deadline:
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), {"sm_mhz": None, "watts": None}


@functools.cache
def _sleep_cycles_per_us():
    """GPU clock cycles per µs of torch.cuda._sleep, measured once (it spins on the SM clock)."""
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(2_000_000)
    end.record()
    torch.cuda.synchronize()
    return 2_000_000 / (start.elapsed_time(end) * 1e3)


def flush_and_cover(cover_us):
    """What runs on the GPU before each call kernel_timed_ms times (and profile_mla.py profiles):
    the L2 flushed by writing 256 MB, then a spin of cover_us (torch.cuda._sleep). Returns the
    function that enqueues both."""
    import torch
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    cover = int(cover_us * _sleep_cycles_per_us())

    def before_call():
        flush.zero_()
        torch.cuda._sleep(cover)
    return before_call


def kernel_timed_ms(fn, args, cover_us=200.0):
    """timed_ms for calls as short as their host side: the median ms of fn() from its first
    kernel's start to its last kernel's end, and the GPU's state meanwhile. do_bench's protocol
    (args.warmup and args.rep ms, the L2 flushed before each call by writing 256 MB, CUDA events
    around the call, args.cool as timed_ms) with one change: between the flush and the start
    event the GPU spins for cover_us (torch.cuda._sleep), so that the host's launch of the call
    (Python and argument checks, tens of µs: as long as a decode kernel) is over before the
    start event fires, and the events time the kernels alone, not a GPU waiting for the host."""
    import torch
    if getattr(args, "cool", 0) > 0:
        torch.cuda.synchronize()
        time.sleep(args.cool)
    before_call = flush_and_cover(cover_us)

    def timed(reps):
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(reps)]
        for start, end in events:
            before_call()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) for start, end in events]

    fn()
    torch.cuda.synchronize()
    begin = time.perf_counter()
    timed(5)
    per_call = (time.perf_counter() - begin) * 1e3 / 5  # ms of one flush, cover and call
    timed(max(1, int(args.warmup / per_call)))
    with GpuState() as state:
        ms = statistics.median(timed(max(5, int(args.rep / per_call))))
    return ms, state.as_dict()


def timing_of(args, fn, gpu_timer=timed_ms):
    """A timing for in_both_orders of a benchmark with --device: gpu_timer's on the GPU
    (timed_ms: do_bench's; kernel_timed_ms), the wall clock's on the CPU."""
    if args.device == "cuda":
        return lambda: gpu_timer(fn, args)
    return lambda: wall_clock_ms(fn, args)


def mean_state(states):
    """The mean of GpuState.as_dict()s; a reading is None where any state lacks it."""
    mean = {}
    for key, digits in (("sm_mhz", None), ("watts", 1)):
        xs = [s.get(key) if s else None for s in states]
        mean[key] = None if not xs or None in xs else round(sum(xs) / len(xs), digits)
    return mean


def put_rounds(row, measured, value):
    """Writes in_both_orders's measurements into a row: row[name] the mean over the two rounds
    of value(x) (x what the timing gave, e.g. ms; value turns it into the row's metric, rounded),
    row["rounds"][name] each round's value, row["gpu"][name] the mean SM clock and power (the
    shape every reader knows), row["gpu_rounds"][name] each round's state, and
    row["round_order"] the first round's order (the second ran in reverse). A round that gave
    no value (None) leaves the headline None."""
    row["round_order"] = list(measured)
    gpu, rounds, gpu_rounds = row.setdefault("gpu", {}), {}, {}
    for name, timed in measured.items():
        values = [None if x is None else value(x) for x, _ in timed]
        rounds[name] = values
        row[name] = None if None in values else round(sum(values) / len(values), 2)
        gpu_rounds[name] = [state for _, state in timed]
        gpu[name] = mean_state(gpu_rounds[name])
    row["rounds"], row["gpu_rounds"] = rounds, gpu_rounds


def clocks(row, impls):
    """A row's SM clocks while each implementation ran, "1650/1710" (MHz; "–" where unknown)."""
    gpu = row.get("gpu", {})
    return "/".join(str(gpu.get(i, {}).get("sm_mhz") or "–") for i in impls)


def grid_parser(doc, impls, tag_default="the dtype"):
    """The argument parser of a grid benchmark (described by its module docstring `doc`) with
    the options every grid takes; the benchmark adds its own and hands the parsed arguments to
    check_grid_args."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory for the .json, .md and .png")
    p.add_argument("--hdims", type=int, nargs="+", default=GRID_HDIMS)
    p.add_argument("--seqlens", type=int, nargs="+", default=GRID_SEQLENS)
    p.add_argument("--causal", choices=["both", "true", "false"], default="both")
    p.add_argument("--tokens", type=int, default=16384, help="batch = tokens / seqlen")
    p.add_argument("--head-budget", type=int, default=2048, help="heads = head_budget / hdim")
    p.add_argument("--impls", nargs="+", choices=impls, default=default_impls(impls),
                   help="default: all, FlashAttention-3's (fa3*) only where HFA_FA3_DIR is set")
    p.add_argument("--tag", default=None, help=f"file name tag (default: {tag_default})")
    p.add_argument("--warmup", type=float, default=25, help="do_bench warmup, ms")
    p.add_argument("--rep", type=float, default=100, help="do_bench repetitions, ms")
    p.add_argument("--cool", type=float, default=0.0,
                   help="seconds of idle GPU before each timing: 0 (default) times each cell in "
                        "the power state the cells before left; 1 with --rep 50 times it at the "
                        "full clock (benchlib.timed_ms)")
    p.add_argument("--no-plot", action="store_true")
    return p


def check_grid_args(parser, a):
    """The grid's derived arguments and its divisibility rules (16k tokens = batch × seqlen,
    head budget = heads × hdim)."""
    a.causals = {"both": [False, True], "true": [True], "false": [False]}[a.causal]
    a.tag = a.tag or a.dtype
    for d in a.hdims:
        if a.head_budget % d:
            parser.error(f"--hdims: {d} does not divide --head-budget {a.head_budget}")
    for s in a.seqlens:
        if a.tokens % s:
            parser.error(f"--seqlens: {s} does not divide --tokens {a.tokens}")
    return a


def grid(args):
    """(hdim, causal, seqlen) in the order the cells run and the tables list them."""
    return itertools.product(args.hdims, args.causals, args.seqlens)


def cell_label(hdim, causal, seqlen):
    return f"hdim {hdim:3d} causal {int(causal)} seqlen {seqlen:5d}"


def gqa_heads(case):
    """"query/KV" heads of a case with both "heads" and "heads_kv" (bench_bwd.py --gqa), which
    the grid's (hdim, causal, seqlen) does not tell apart; None for a grid cell."""
    return f"{case['heads']}/{case['heads_kv']}" if "heads" in case and "heads_kv" in case else None


def new_result(what, now, args, accuracy, **settings):
    """The header every result JSON starts with (docs/design.md §5: one shape for every file);
    `settings` adds this benchmark's own entries after the common ones (args' tokens and
    head_budget where it has them). A smoke run (args.device "cpu") names no CUDA device or
    versions, and its timing is the wall clock's (wall_clock_ms)."""
    import torch

    import hfa
    common = {"dtype": args.dtype,
              **{k: getattr(args, k) for k in ("tokens", "head_budget") if hasattr(args, k)}}
    if getattr(args, "device", "cuda") == "cpu":
        return {
            "what": what, "commit": git_commit(), "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "device": f"cpu ({platform.machine()}): smoke run, wall-clock timing, not to report",
            "versions": {"torch": torch.__version__, "hfa": hfa.version()},
            "settings": {**common,
                         "wall_clock": f"median, warmup {args.warmup} ms, rep {args.rep} ms",
                         "accuracy": accuracy, **settings},
            "rows": [], "accuracy": [], "skipped": [],
        }
    import triton
    return {
        "what": what,
        "commit": git_commit(),
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": torch.cuda.get_device_name(),
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda,
                     "cudnn": torch.backends.cudnn.version(), "triton": triton.__version__,
                     "hfa": hfa.version()},
        "settings": {**common,
                     "do_bench": f"median, warmup {args.warmup} ms, rep {args.rep} ms",
                     "cool_s": getattr(args, "cool", 0.0),
                     "accuracy": accuracy, **settings},
        "rows": [], "accuracy": [], "skipped": [],
    }


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc)


def announce(result):
    print(f"bench: {result['device']}; " + ", ".join(f"{k} {v}" for k, v in
                                                   result["versions"].items()), flush=True)


def record_cell(result, run, case, impls, t0, variants=({},), checks=("pass",), own=("hfa",)):
    """Runs one grid cell and appends what it measured to `result`. run() -> (rows, acc,
    skipped): one row per entry of `variants` (case keys added to `case`), the cell's accuracy
    entry, and {"case", "impl", "reason"} for each implementation that could not run.
    An exception out of run() (e.g. a sticky CUDA error) is recorded as null rows and a failed
    accuracy, and the grid goes on, so that the cells measured so far are written.
    Returns how many bad outcomes to report: errors of our own implementations (`own`), and
    accuracy keys among `checks` that are False."""
    bad = 0
    try:
        rows, acc, skipped = run()
    except Exception as e:  # noqa: BLE001 - keep the cells measured so far
        rows = [{"case": {**case, **v}, "metric": "tflops", **{i: None for i in impls}}
                for v in variants]
        acc = {"case": case, "pass": False}
        skipped = [{"case": rows[0]["case"], "impl": "cell",
                    "reason": f"error: {type(e).__name__}: {first_line(e)}"}]
        bad += 1
    result["rows"] += rows
    result["accuracy"].append(acc)
    result["skipped"] += skipped
    bad += sum(bool(s["reason"].startswith("error") and s["impl"] in own) for s in skipped)
    bad += sum(acc.get(k) is False for k in checks)
    for row in rows:
        c = row["case"]
        label = " ".join([cell_label(c["hdim"], c["causal"], c["seqlen_q"])]
                         + ([f"b{c['batch']} h{gqa_heads(c)}"] if gqa_heads(c) else [])
                         + [str(c[k]) for k in VARIANT_KEYS if k in c])
        summary = "  ".join(f"{i} {fmt(row.get(i))}" for i in impls)
        if row.get("gpu"):
            summary += f"  MHz {clocks(row, impls)}"
        print(f"{label}: {summary}  acc {acc.get('pass')}  [{time.time() - t0:.0f}s]",
              flush=True)
    import torch
    torch.cuda.empty_cache()
    return bad


def record_case(result, run, base, null_rows, label, impls, t0, own=("hfa",), device="cuda"):
    """record_cell's protocol for a benchmark whose cases are not the grid's (hdim, causal,
    seqlen): run() -> (rows, accuracy entry, skipped entries) appended to result; an exception
    out of it (a sticky CUDA error, no memory) recorded as the rows null_rows() (the case's rows
    with null values), a failed accuracy and one skip entry, so that the cases measured so far
    are written. One line a row: label(row's case), each implementation's value, the SM clocks
    on the GPU. Returns how many bad outcomes: errors of our own implementations (`own`) and a
    failed accuracy."""
    bad = 0
    try:
        rows, acc, skipped = run()
    except Exception as e:  # noqa: BLE001 - keep the cases measured so far
        rows = null_rows()
        acc = {"case": base, "pass": False}
        skipped = [{"case": base, "impl": "case",
                    "reason": f"error: {type(e).__name__}: {first_line(e)}"}]
        bad += 1
    result["rows"] += rows
    result["accuracy"].append(acc)
    result["skipped"] += skipped
    bad += sum(s["reason"].startswith("error") and s["impl"] in own for s in skipped)
    bad += acc.get("pass") is False
    for row in rows:
        summary = "  ".join(f"{i} {fmt(row.get(i))}" for i in impls)
        if device == "cuda":
            summary += f"  MHz {clocks(row, impls)}"
        print(f"{label(row['case'])}: {summary}  acc {acc.get('pass')}  "
              f"[{time.time() - t0:.0f}s]", flush=True)
    if device == "cuda":
        import torch
        torch.cuda.empty_cache()
    return bad


def worst(a, b):
    """max that keeps NaN: a NaN error must fail the check, not vanish."""
    return b if b != b or b > a else a


def event_seconds(fn, warmup, reps):
    """Median seconds of fn() over reps calls timed with CUDA events, after warmup calls: for
    calls long enough (milliseconds and up) that do_bench's many repetitions would take too
    long (whole models, ring steps)."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


def kernel_profile(fn, steps, warmup=3):
    """Mean µs per fn() call of each CUDA kernel it launches, by name (torch.profiler over
    `steps` calls after `warmup`): where a step's GPU time goes (bench/profile_fwdbwd.py,
    bench_model.py --profile)."""
    from collections import defaultdict

    import torch
    from torch.profiler import ProfilerActivity, profile
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    per_name = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per_name[e.name] += e.device_time / steps
    return dict(sorted(per_name.items(), key=lambda kv: -kv[1]))


def print_kernel_profile(label, kernels, top=None):
    """One line of the total, then one a kernel (the `top` longest), µs per step."""
    print(f"{label}: kernels {sum(kernels.values()):.0f} µs a step")
    for name, us in list(kernels.items())[:top]:
        print(f"    {us:9.1f} µs  {name[:110]}")


def profile_once(fn, warmup=3):
    """fn() once between cudaProfilerStart and Stop, after warmup calls: the one call that
    `ncu --profile-from-start off` sees (bench/profile_*.py)."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


# --- outputs ----------------------------------------------------------------------------------

def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "–"


def fmt(x):
    return f"{x:.1f}" if x is not None else "–"


def sci(x):
    return f"{x:.2e}" if x is not None else "–"


def forward_verdict(acc, errs, lse_err, hfa_out, hfa_lse):
    """Design §6's verdict on a forward cell, into acc: each implementation's max error (errs),
    and whether hfa passes: its out and lse finite everywhere (they start as NaN, so finite =
    all written; every row sees a key, s_q = s_k, so no LSE is -inf), its error within 2x
    cuDNN's + 1e-5 and its LSE within 1e-3. No verdict without hfa or without cuDNN."""
    for impl, e in errs.items():
        acc[f"{impl}_max_err"] = e
    if hfa_out is None:
        acc["pass"] = None
        return
    import torch
    finite = bool(torch.isfinite(hfa_out).all().item() and torch.isfinite(hfa_lse).all().item())
    acc["hfa_finite"] = finite
    acc["hfa_lse_max_err"] = lse_err
    if "cudnn" in errs:
        bound = 2 * errs["cudnn"] + 1e-5
        acc["bound"] = bound
        acc["pass"] = finite and errs["hfa"] <= bound and lse_err <= 1e-3
    else:
        acc["pass"] = None  # no peer to set the tolerance
        acc["note"] = "cudnn did not run: no tolerance"


def verdict(acc):
    return {True: "pass", False: "**FAIL**", None: "–"}[acc.get("pass")]


def accuracy_of(result):
    """case -> its accuracy entry ({} when none), the variant keys left out of the match."""
    def key(case):
        return json.dumps({k: v for k, v in case.items() if k not in VARIANT_KEYS},
                          sort_keys=True)
    index = {key(a["case"]): a for a in result["accuracy"]}
    return lambda case: index.get(key(case), {})


def case_cells(case):
    """The first columns of a grid table; heads as query/KV heads where the case has heads_kv."""
    heads = gqa_heads(case) or str(case["heads"])
    return [str(case["hdim"]), "T" if case["causal"] else "F", str(case["seqlen_q"]),
            f"{case['batch']}×{heads}"]


def table(head, body):
    """The lines of a markdown table: the header `head`, a row per list of cells in `body`."""
    return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(cells) + " |" for cells in body])


def targets_markdown(issue, targets, counted="checked", detail=lambda target: ""):
    """The markdown lines of a result's "targets" (each {"target", "verdict", "cells", "short"}):
    a heading naming the issue that set them, a line each; detail(target) adds to its count."""
    lines = ["", f"## Targets (issue {issue})", ""]
    lines += [f"- {t['target']}: **{t['verdict']}** ({t['cells']} {counted}" + detail(t)
              + (f"; short: {t['short']}" if t["short"] else "") + ")" for t in targets]
    return lines


def markdown(title, result, head, body):
    """The result as a markdown document: header, one table row per list of cells in `body`,
    and what did not run."""
    lines = [f"# {title} ({result['date']})", "",
             f"- device: {result['device']}", f"- commit: `{result['commit']}`",
             "- versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()),
             f"- settings: {result['settings']}", ""] + table(head, body)
    if result["skipped"]:
        lines += ["", "Not run:", ""]
        for s in result["skipped"]:
            c = s["case"]
            if "hdim" in c:  # a grid cell
                where = "".join(f", {k} {c[k]}" for k in VARIANT_KEYS if k in c)
                at = f"hdim {c['hdim']}, causal {c['causal']}, seqlen {c['seqlen_q']}{where}"
                if gqa_heads(c):  # a list of shapes: cells that share the above differ here
                    at += f", batch {c['batch']}, heads {gqa_heads(c)}"
            else:
                at = ", ".join(f"{k} {v}" for k, v in c.items())
            lines.append(f"- {s['impl']} at {at}: {s['reason']}")
    return "\n".join(lines) + "\n"


def write_plot(path, result, impls, hdims, panels, title):
    """TFLOP/s over seqlen: a column per hdim, a row per entry of `panels` (the case fields a
    panel's rows match, e.g. {"causal": True}). Variants of an implementation (an underscore in
    the name: cudnn_bshd, hfa_det) are dashed beside it. False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"bench: no plot ({e})", file=sys.stderr)
        return False
    fig, axes = plt.subplots(len(panels), len(hdims), squeeze=False,
                             figsize=(4.2 * len(hdims), 3.4 * len(panels)))
    for i, panel in enumerate(panels):
        for j, hdim in enumerate(hdims):
            ax = axes[i][j]
            match = {"hdim": hdim, **panel}
            rows = [r for r in result["rows"]
                    if all(r["case"].get(k) == v for k, v in match.items())]
            for impl in impls:
                pts = [(r["case"]["seqlen_q"], r[impl]) for r in rows if r.get(impl)]
                if pts:
                    xs, ys = zip(*pts)
                    ax.plot(xs, ys, marker="o", label=impl,
                            linestyle="--" if "_" in impl else "-")
            ax.set_xscale("log", base=2)
            ax.set_title(f"hdim {hdim}, {'causal' if panel['causal'] else 'non-causal'}"
                         + "".join(f", {v}" for k, v in panel.items() if k != "causal"))
            ax.set_xlabel("seqlen (batch x seqlen fixed)")
            ax.set_ylabel("TFLOP/s")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{title}, {result['device']}, {result['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def write_results(stem, result, md, plot=None):
    """<stem>.json, <stem>.md (the text `md`) and, when `plot` (path -> bool) draws one,
    <stem>.png. Returns the paths written."""
    with open(stem + ".json", "w") as fh:
        json.dump(result, fh, indent=1)
    with open(stem + ".md", "w") as fh:
        fh.write(md)
    written = [stem + ".json", stem + ".md"]
    if plot is not None and plot(stem + ".png"):
        written.append(stem + ".png")
    return written


def conclude(result, written, t0, bad, strict):
    """The closing lines; the exit status (1 for bad cells under --strict)."""
    print(f"bench: {len(result['rows'])} cells in {time.time() - t0:.0f}s; wrote "
          + ", ".join(written))
    if bad:
        print(f"bench: {bad} cell(s) with hfa errors or failed accuracy", file=sys.stderr)
    return 1 if (bad and strict) else 0
