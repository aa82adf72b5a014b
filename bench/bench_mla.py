#!/usr/bin/env python3
"""MLA decode benchmark (issue 34): hfa.flash_mla_with_kvcache against FlashMLA's, on FlashMLA's
shapes and with its counting, one GPU.

The problem (../shared/mla-notes.md §1): DeepSeek's absorbed MLA is MQA with one latent KV head,
d_qk 576, d_v 512, V the first 512 columns of the same cache rows. bf16 q and cache, page 64
(FlashMLA's only page size), block tables of shuffled pages, every slot past a sequence's end
NaN (FlashMLA's test's poisoning: a kernel that lets it into a sum gives NaN), softmax scale
576^-0.5 (FlashMLA's default), random normal q and cache.

--cache fp8: FlashMLA's FP8 cache (DeepSeek-V3.2's 656-byte records: 512 e4m3 latent codes, 4
fp32 scales, 64 bf16 rotary values; hfa's "fp8_mla" format) made here in torch from the same bf16
cache (fp8_records: hfa's quantizer rule, which the GPU's quantizer does not implement), its
padding slots NaN as the bf16 one's; the reference reads the values the records decode to.
FlashMLA has no dense FP8 decode on sm90 (its column is null, with its error as the reason).

Grid (mla-notes §8's performance grid): batch 64 and 128; seqlen_k 1k, 4k, 16k, fixed (every
sequence that long) and ragged (max(int(normal(s_k, s_k / 2)), max s_q) keys per sequence,
Python's random seeded as FlashMLA's benchmark seeds it); 16, 64 and 128 query heads; s_q 1 and
2 (2: MTP, causal = s_q > 1, bottom-right aligned: the second token sees one key more). One
cache per (batch, s_k, fixed/ragged), shared by its s_q and head counts.

Implementations, one process, the same inputs:
  hfa       hfa.flash_mla_with_kvcache(q, cache, block_table, cache_seqlens, 512, holder,
            softmax_scale=576^-0.5, causal=s_q > 1), holder = hfa.get_mla_metadata(...)[0].
            hfa's sm90 backend has no MLA kernel yet: it raises NotImplementedError naming the
            argument, and the column is null with that reason in "skipped" (FlashMLA still runs).
  flashmla  FlashMLA's flash_mla.flash_mla_with_kvcache, the same call with its own holder
            (flash_mla.get_mla_metadata(...)[0], its API since January 2026), from the folder
            HFA_FLASHMLA_DIR names (../shared/peers/flashmla: built for the H200, bf16 dense and
            sparse FP8 decode). Unset or not importable: null with the reason, once for the run.
Each implementation's holder is new for each case and filled by a first call outside any timing
(each runs its scheduler kernel then, into the holder), so that no timed call computes a
schedule; every timed call reuses it, as a serving engine's layers do (--schedule per-call: hfa's
calls get no holder and each makes its own, what a step's first layer pays).

Timing: µs per call, the whole call (its first kernel's start to the combine's end), medians
of CUDA events around each call with the L2 flushed (256 MB written) before it: do_bench's
protocol, with the GPU held busy for --cover-us between the flush and the start event so that the
host's launch of the call is not timed (benchlib.kernel_timed_ms; a decode call's Python side
takes as long as its kernels); --timer do_bench: triton.testing.do_bench itself
(benchlib.timed_ms). Each case twice, --impls in order then reversed (benchlib.in_both_orders:
the 700 W limit moves the clock with what ran before); a row's value is the mean of the two,
"rounds" and "gpu_rounds" (SM clock, power) keep each round's.

Counting (FlashMLA's, mla-notes §1), per case over its batch:
  FLOP  = 2·h_q·s_q·Σ seqlen_k·(576 + 512)          (the causal triangle of MTP not discounted)
  bytes = Σ seqlen_k·576·2 + b·s_q·h_q·(576 + 512)·2  (the cache read once, plus q and out; an
          FP8 cache's token is 656 bytes, not 576·2)
Rows: {"case", "metric": "us", "hfa", "flashmla", "hfa_gbps", "flashmla_gbps", "hfa_tflops",
"flashmla_tflops", ...}: GB/s and TFLOP/s from each implementation's mean time.

Accuracy on every case (docs/design.md §6), against float64 attention over the bf16 values, on
the device. Every sequence: out within FlashMLA's bf16 tolerance taken of each column's
magnitude, |out - ref| <= 8e-4 + 2.01/128 · (Σ p·|v| / Σ p) (FlashMLA's test tolerances,
8e-4 or 2.01/128 relative, are of |ref|; where the terms of P·V cancel, the P rounded to bf16
that both kernels multiply V by errs by a few ulps of the terms, not of their sum; the GPU tests
use the same bound), lse within 1e-6 or 8.01/65536 relative, out's cosine difference < 5e-6;
for each implementation, a wrong key, page or mask exceeds it. The first, the longest and the
last sequence (--acc-seqs: how many of those) also give each implementation's max |error|.
hfa passes when its output is finite everywhere (it starts as NaN), it is within the tolerance
on every sequence, and each of its max errors <= 2·FlashMLA's + 1e-5 (where FlashMLA ran).

Issue 34's targets, in the JSON's "targets": hfa >= 1.0x FlashMLA on every row (FlashMLA's time
over hfa's); beyond, >= 4300 GB/s memory bound (the best row with h_q·s_q <= 64, mla-notes §1's
regime below the H200's crossover near 100) and >= 700 TFLOP/s at 128 heads (the best such row).

--device cpu (or --smoke: tiny shapes, short timings, cpu unless --device says otherwise) is a
smoke path, nothing to report: hfa's CPU backend computes MLA, FlashMLA is CUDA-only (null), the
timings are wall-clock medians (benchlib.wall_clock_ms) and the header names no CUDA versions.

Writes <out>/<date>-mla-<tag>.{json,md}.

    HFA_FLASHMLA_DIR=path/to/flashmla python3 bench/bench_mla.py --out DIR
        [--batches 128 --seqlens 4096 --heads 16 128 --seqlens-q 1 --kinds fixed]
    python3 bench/bench_mla.py --out /tmp/mla-smoke --smoke
"""

import argparse
import contextlib
import functools
import itertools
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (accuracy_of, announce, clocks, conclude, fmt,  # noqa: E402
                      in_both_orders, kernel_timed_ms, markdown, nan_filled_empty, new_result,
                      peer_for_run, peer_module, put_rounds, ratio, record_case, sci,
                      skip_reason, targets_markdown, timed_ms, timing_of, utc_now, verdict, worst,
                      write_results)

IMPLS = ["hfa", "flashmla"]  # column order
D_QK, D_V, PAGE = 576, 512, 64
SCALE = D_QK ** -0.5
KINDS = ["fixed", "ragged"]
FLASHMLA_DIR_VARIABLE = "HFA_FLASHMLA_DIR"
# FlashMLA's test tolerances (tests/test_flash_mla_dense_decoding.py, mla-notes §8), out's
# relative one taken of each column's magnitude (the module docstring says why).
OUT_ABS, OUT_REL, OUT_COS = 8e-4, 2.01 / 128, 5e-6
LSE_ABS, LSE_REL = 1e-6, 8.01 / 65536
# Issue 34's targets.
SPEEDUP_OVER_FLASHMLA = 1.0
MEMORY_BOUND_GBPS = 4300.0
MEMORY_BOUND_HEADS_X_SQ = 64  # h_q·s_q at most this: memory bound on the H200 (mla-notes §1)
COMPUTE_BOUND_TFLOPS = 700.0
COMPUTE_BOUND_HEADS = 128
# --smoke's defaults: a few seconds on two CPU cores; explicit options still win.
SMOKE = {"device": "cpu", "batches": [3], "seqlens": [100, 300], "heads": [16, 128],
         "warmup": 1.0, "rep": 20.0}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory for the .json and .md")
    p.add_argument("--batches", type=int, nargs="+", default=[64, 128])
    p.add_argument("--seqlens", type=int, nargs="+", default=[1024, 4096, 16384],
                   help="seqlen_k: every sequence's (fixed), or the mean (ragged)")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=KINDS)
    p.add_argument("--heads", type=int, nargs="+", default=[16, 64, 128], help="query heads")
    p.add_argument("--seqlens-q", type=int, nargs="+", default=[1, 2],
                   help="query tokens per sequence (> 1: causal)")
    p.add_argument("--impls", nargs="+", choices=IMPLS, default=IMPLS)
    p.add_argument("--dtype", choices=["bf16"], default="bf16",
                   help="q and cache (FlashMLA's build has bf16 only)")
    p.add_argument("--cache", choices=["bf16", "fp8"], default="bf16",
                   help="fp8: FlashMLA's 656-byte FP8 records of the bf16 cache (is_fp8_kvcache)")
    p.add_argument("--schedule", choices=["kept", "per-call"], default="kept",
                   help="per-call: hfa's calls get no holder, so each makes its schedule (a "
                        "step's first layer); kept: the holder's, made before the timing")
    p.add_argument("--acc-seqs", type=int, choices=[0, 1, 2, 3], default=3,
                   help="sequences checked against float64: the first, the longest, the last")
    p.add_argument("--tag", default=None, help="file name tag (default: the dtype, -cpu added "
                                               "with --device cpu)")
    p.add_argument("--warmup", type=float, default=25, help="ms of calls before a timing")
    p.add_argument("--rep", type=float, default=100, help="ms of timed calls (their median)")
    p.add_argument("--cool", type=float, default=0.0,
                   help="seconds of idle GPU before each timing (benchlib.timed_ms)")
    p.add_argument("--timer", choices=["events", "do_bench"], default="events",
                   help="events: benchlib.kernel_timed_ms (the host's launch not timed); "
                        "do_bench: benchlib.timed_ms")
    p.add_argument("--cover-us", type=float, default=200.0,
                   help="events: µs the GPU spins before each call's start event")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: a smoke run (hfa's CPU backend, wall-clock timing), not numbers "
                        "to report")
    p.add_argument("--smoke", action="store_true",
                   help="tiny shapes and short timings, on the CPU unless --device says "
                        f"otherwise: {SMOKE}")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if any case errs in hfa (other than not-implemented) or fails "
                        "accuracy")
    a = p.parse_args(argv)
    if a.smoke:  # its defaults under the options given
        p.set_defaults(**SMOKE)
        a = p.parse_args(argv)
    for name in ("batches", "seqlens", "heads", "seqlens_q"):
        if min(getattr(a, name)) < 1:
            p.error(f"--{name.replace('_', '-')}: must be >= 1")
    a.tag = a.tag or (a.dtype + ("-fp8cache" if a.cache == "fp8" else "")
                      + ("-cpu" if a.device == "cpu" else ""))
    return a


# --- inputs -----------------------------------------------------------------------------------

def seqlens_of(batch, s_k, kind, floor, seed):
    """Each sequence's keys: s_k (fixed), or max(int(normal(s_k, s_k / 2)), floor) (ragged,
    FlashMLA's is_varlen rule, Python's random with `seed` as its benchmark's)."""
    if kind == "fixed":
        return [s_k] * batch
    rng = random.Random(seed)
    return [max(int(rng.normalvariate(s_k, s_k / 2)), floor) for _ in range(batch)]


def make_cache(lens, device, gen):
    """(cache (pages, 64, 1, 576), block_table (b, pages per sequence) int32, cache_seqlens (b,)
    int32): each sequence owns ceil(max len / 64) shuffled pages; every slot past its end NaN."""
    import torch
    b, per_seq = len(lens), max(1, -(-max(lens) // PAGE))
    cache = torch.randn((b * per_seq, PAGE, 1, D_QK), dtype=torch.bfloat16, device=device,
                        generator=gen)
    table = torch.randperm(b * per_seq, device=device, generator=gen).int().view(b, per_seq)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=device)
    position = torch.arange(per_seq * PAGE, device=device)
    rows = (table.long()[:, :, None] * PAGE + torch.arange(PAGE, device=device)).view(b, -1)
    cache.view(-1, D_QK)[rows[position[None, :] >= seqlens[:, None].long()]] = float("nan")
    return cache, table, seqlens


def fp8_records(cache):
    """(records, decoded) of a bf16 cache (pages, 64, 1, 576): FlashMLA's FP8 records (pages, 64,
    1, 656) uint8 (hfa's fp8_mla format, quant/mla_fp8.hpp: 512 e4m3 codes, each 128's scale the
    smallest power of two >= max(amax / 448, 1e-4) in fp32, the 64 rotary values as they are),
    and the bf16 values they decode to (e4m3 · scale, rounded to bf16). A NaN row (a padding slot)
    gets a NaN scale, NaN codes and decodes to NaN."""
    import torch
    latent = cache[..., :D_V].float().unflatten(-1, (4, D_V // 4))
    least = torch.clamp(latent.abs().amax(-1, keepdim=True) / 448.0, min=1e-4)
    scale = torch.exp2(torch.ceil(torch.log2(least)))
    codes = (latent / scale).to(torch.float8_e4m3fn)
    rotary = cache[..., D_V:].contiguous()
    records = torch.cat([codes.flatten(-2).view(torch.uint8),
                         scale.squeeze(-1).contiguous().view(torch.uint8),
                         rotary.view(torch.uint8)], dim=-1)
    decoded = torch.cat([(codes.float() * scale).flatten(-2).to(torch.bfloat16), rotary], dim=-1)
    return records, decoded


def counts(lens, heads, s_q, token_bytes=D_QK * 2):
    """(FLOP, bytes) of a case, FlashMLA's counting (token_bytes: a cache token's)."""
    keys = sum(lens)
    return (2.0 * heads * s_q * keys * (D_QK + D_V),
            keys * token_bytes + len(lens) * s_q * heads * (D_QK + D_V) * 2.0)


# --- the implementations ----------------------------------------------------------------------

@functools.cache
def flashmla_module():
    """(FlashMLA's flash_mla package, None) or (None, why not): from the folder HFA_FLASHMLA_DIR
    names, imported once."""
    return peer_module(FLASHMLA_DIR_VARIABLE, "flash_mla",
                       "FlashMLA's folder, e.g. ../shared/peers/flashmla")


def flashmla_for_run(result, args):
    """flash_mla for this run, or None (each wanted column then null, the reason recorded once
    for the run): not asked for, not loadable, or a CPU run (FlashMLA runs on CUDA only)."""
    if "flashmla" in args.impls and args.device == "cpu":
        why = "not available: FlashMLA runs on CUDA only (--device cpu)"
        result["skipped"].append({"case": {"cells": "all"}, "impl": "flashmla", "reason": why})
        print(f"bench: flashmla: {why}", flush=True)
        return None
    return peer_for_run(result, [i for i in args.impls if i == "flashmla"], flashmla_module,
                        "flashmla", "flash_mla")


def calls(args, inputs, flash_mla, records):
    """impl -> (a function making a fresh holder and returning the call that uses it); records:
    the FP8 cache the calls read instead of the bf16 one (--cache fp8), else None."""
    import hfa
    q, cache, table, seqlens = inputs
    s_q, heads = q.shape[1], q.shape[2]
    fp8 = records is not None
    read = records if fp8 else cache

    def call_with(module):
        def make():
            # The old API's arguments, as vLLM passes them: both APIs accept and ignore them now.
            per_call = module is hfa and args.schedule == "per-call"
            holder = None if per_call else module.get_mla_metadata(seqlens, s_q * heads, 1)[0]
            return lambda: module.flash_mla_with_kvcache(
                q, read, table, seqlens, D_V, holder, softmax_scale=SCALE, causal=s_q > 1,
                is_fp8_kvcache=fp8)
        return make

    made = {"hfa": call_with(hfa)}
    if flash_mla is not None:
        made["flashmla"] = call_with(flash_mla)
    return {i: made[i] for i in args.impls if i in made}


def synchronize(device):
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


def probe(args, makers):
    """Each implementation's first call (it fills its holder: the schedule is made here, outside
    any timing). Returns (steps: impl -> the call to time, results: impl -> (out, lse), notes:
    impl -> why it cannot run this case)."""
    steps, results, notes = {}, {}, {}
    for impl, make in makers.items():
        try:
            # hfa's outputs start as NaN, so that finite results mean every element was written.
            with nan_filled_empty() if impl == "hfa" else contextlib.nullcontext():
                step = make()
                results[impl] = step()
                synchronize(args.device)
        except Exception as e:  # noqa: BLE001 - NotImplementedError (hfa's sm90), a peer's error
            notes[impl] = skip_reason(e)
            continue
        steps[impl] = step
    return steps, results, notes


# --- accuracy ---------------------------------------------------------------------------------

def checked_sequences(lens, n):
    """The first n of (first, longest, last), without repeats."""
    longest = max(range(len(lens)), key=lambda i: lens[i])
    return list(dict.fromkeys([0, longest, len(lens) - 1]))[:n]


def reference(q, cache, table, length):
    """float64 (out (s_q, h_q, 512), lse (h_q, s_q), magnitude (s_q, h_q, 512): Σ p·|v| / Σ p)
    of one sequence: q (s_q, h_q, 576), its `length` keys gathered from its pages; causal for
    s_q > 1 (query row j sees the first length - s_q + 1 + j keys)."""
    import torch
    pages = table[:max(1, -(-length // PAGE))].long()
    keys = cache[pages].reshape(-1, D_QK)[:length].double()  # (L, 576)
    s_q = q.shape[0]
    scores = torch.einsum("shd,ld->hsl", q.double(), keys) * SCALE
    if s_q > 1:
        seen = torch.ones(s_q, length, dtype=torch.bool, device=q.device).tril(length - s_q)
        scores = scores.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (h, s_q)
    p = torch.exp(scores - lse[..., None]).nan_to_num(0.0)  # an empty row: no keys, p = 0
    out = torch.einsum("hsl,ld->shd", p, keys[:, :D_V])
    magnitude = torch.einsum("hsl,ld->shd", p, keys[:, :D_V].abs())
    return out, lse, magnitude


def difference(got, ref):
    """|got - ref|, 0 where both are the same infinity (an empty sequence's lse)."""
    import torch
    return torch.where(got == ref, torch.zeros_like(ref), (got - ref).abs())


def within_tolerance(out, lse, ref):
    """Whether one sequence's (out, lse) is within FlashMLA's tolerances of the float64 ref."""
    ref_out, ref_lse, magnitude = ref
    out, lse = out.double(), lse.double()
    lse_err = difference(lse, ref_lse)
    return bool((difference(out, ref_out) <= OUT_ABS + OUT_REL * magnitude).all().item()
                and ((lse_err <= LSE_ABS) | (lse_err <= LSE_REL * ref_lse.abs())).all().item()
                and abs(cosine_difference(out, ref_out)) < OUT_COS)


def cosine_difference(got, ref):
    den = (got * got + ref * ref).sum().item()
    return 0.0 if den < 1e-12 else 1 - 2 * (got * ref).sum().item() / den


def check_accuracy(args, case, results, inputs, lens):
    """The case's accuracy entry: each implementation within FlashMLA's tolerances of float64 on
    every sequence, its max errors on the checked ones, and hfa's verdict."""
    import torch
    q, cache, table, _ = inputs
    seqs = checked_sequences(lens, args.acc_seqs)
    acc = {"case": case, "pass": None, "checked": {"sequences": seqs}}
    errs = {impl: {"out": 0.0, "lse": 0.0} for impl in results}
    within = {impl: True for impl in results}
    for i, length in enumerate(lens):
        ref = reference(q[i], cache, table[i], length)
        for impl, (out, lse) in results.items():
            within[impl] = within[impl] and within_tolerance(out[i], lse[i], ref)
            if i in seqs:
                e = errs[impl]
                e["out"] = worst(e["out"], difference(out[i].double(), ref[0]).max().item())
                e["lse"] = worst(e["lse"], difference(lse[i].double(), ref[1]).max().item())
    for impl, e in errs.items():
        acc.update({f"{impl}_{name}_max_err": x for name, x in e.items()} if seqs else {})
    acc.update({f"{impl}_within_tolerance": x for impl, x in within.items()})
    if "hfa" in results and "flashmla" in results:
        (h_out, h_lse), (f_out, f_lse) = results["hfa"], results["flashmla"]
        acc["hfa_vs_flashmla_out_max_diff"] = (h_out.double() - f_out.double()).abs().max().item()
        acc["hfa_vs_flashmla_lse_max_diff"] = difference(h_lse.double(), f_lse.double()).max().item()
    if "hfa" not in results:
        acc["note"] = "hfa did not run"
        return acc
    out, lse = results["hfa"]
    finite = bool(torch.isfinite(out).all().item() and torch.isfinite(lse).all().item())
    acc["hfa_finite"] = finite
    acc["pass"] = finite and within["hfa"]
    if "flashmla" in results and seqs:
        bounds = {name: 2 * errs["flashmla"][name] + 1e-5 for name in ("out", "lse")}
        acc.update({f"bound_{name}": x for name, x in bounds.items()})
        acc["pass"] = acc["pass"] and all(errs["hfa"][n] <= x for n, x in bounds.items())
    elif "flashmla" not in results:
        acc["note"] = "flashmla did not run: FlashMLA's tolerances against float64 only"
    return acc


# --- one case ---------------------------------------------------------------------------------

def label(case):
    return (f"b{case['batch']:3d} s_k {case['seqlen_k']:5d} {case['kind']:<6} "
            f"h_q {case['heads']:3d} s_q {case['seqlen_q']}")


def run_case(args, case, lens, cache_inputs, flash_mla, gen):
    """([row], accuracy entry, skipped entries) of one case (benchlib.record_case's run);
    cache_inputs: (the values the reference reads, block table, lengths, FP8 records or None)."""
    import torch
    b, heads, s_q = case["batch"], case["heads"], case["seqlen_q"]
    q = torch.randn((b, s_q, heads, D_QK), dtype=torch.bfloat16, device=args.device,
                    generator=gen)
    *cache_values, records = cache_inputs
    inputs = (q, *cache_values)
    steps, results, notes = probe(args, calls(args, inputs, flash_mla, records))
    acc = check_accuracy(args, case, results, inputs, lens)
    del results

    flop, nbytes = counts(lens, heads, s_q,
                          D_QK * 2 if records is None else records.shape[-1])
    row = {"case": case, "metric": "us", **dict.fromkeys(args.impls)}
    measured = in_both_orders({impl: timing_of(args, step, gpu_timer(args))
                               for impl, step in steps.items()})
    put_rounds(row, measured, lambda ms: round(ms * 1e3, 2))
    for impl in steps:
        us = row[impl]
        row[f"{impl}_gbps"] = round(nbytes / (us * 1e-6) / 1e9, 1)
        row[f"{impl}_tflops"] = round(flop / (us * 1e-6) / 1e12, 3)
    skipped = [{"case": case, "impl": impl, "reason": reason} for impl, reason in notes.items()]
    return [row], acc, skipped


def gpu_timer(args):
    """--timer's benchlib function, (fn, args) -> (ms, GPU state)."""
    if args.timer == "do_bench":
        return timed_ms
    return lambda fn, a: kernel_timed_ms(fn, a, cover_us=args.cover_us)


def null_rows(args, case):
    return [{"case": case, "metric": "us", **dict.fromkeys(args.impls)}]


# --- targets ----------------------------------------------------------------------------------

def where(case):
    return (f"b{case['batch']} s_k {case['seqlen_k']} {case['kind']} h_q {case['heads']} "
            f"s_q {case['seqlen_q']}")


def speed_target(rows):
    """hfa >= 1.0x FlashMLA on every row: met where every row reaches it, missed where one does
    not (or is null beside a FlashMLA time), not measured where no row has both."""
    ratios = [{**{k: r["case"][k] for k in ("batch", "seqlen_k", "kind", "heads", "seqlen_q")},
               "value": round(r["flashmla"] / r["hfa"], 3) if r.get("hfa") and r.get("flashmla")
               else None} for r in rows]
    short = [(r, x["value"]) for r, x in zip(rows, ratios)
             if x["value"] is None or x["value"] < SPEEDUP_OVER_FLASHMLA]
    if all(x["value"] is None for x in ratios):
        word, short = "not measured", []
    else:
        word = "missed" if short else "met"
    return {"target": f"hfa >= {SPEEDUP_OVER_FLASHMLA}x FlashMLA on every row (FlashMLA's time "
                      "over hfa's)",
            "verdict": word, "cells": len(rows),
            "short": ", ".join(f"{where(r['case'])}: " + ("null" if x is None else f"{x:.2f}")
                               for r, x in short),
            "ratios": ratios}


def best_target(text, rows, key, bound, smoke):
    """A goal on the best of `rows` (hfa's `key`, e.g. hfa_gbps): met where it reaches bound;
    FlashMLA's best beside; "ratios" lists each row's hfa and FlashMLA values. Not measured in a
    smoke run (`smoke`: the CPU's rates say nothing of these GPU goals)."""
    values = [{**{k: r["case"][k] for k in ("batch", "seqlen_k", "kind", "heads", "seqlen_q")},
               "value": r.get(f"hfa_{key}"), "flashmla": r.get(f"flashmla_{key}")} for r in rows]
    best = max((v["value"] for v in values if v["value"] is not None), default=None)
    peer = max((v["flashmla"] for v in values if v["flashmla"] is not None), default=None)
    word = ("not measured" if best is None or smoke else "met" if best >= bound
            else "missed")
    return {"target": text, "verdict": word, "cells": len(rows), "best": best,
            "flashmla_best": peer, "short": "" if word != "missed" else f"best {best}",
            "ratios": values}


def target_verdicts(result, smoke):
    rows = [r for r in result["rows"] if "kind" in r["case"]]
    memory = [r for r in rows
              if r["case"]["heads"] * r["case"]["seqlen_q"] <= MEMORY_BOUND_HEADS_X_SQ]
    compute = [r for r in rows if r["case"]["heads"] == COMPUTE_BOUND_HEADS]
    return [
        speed_target(rows),
        best_target(f"beyond: >= {MEMORY_BOUND_GBPS:.0f} GB/s memory bound (the best row with "
                    f"h_q·s_q <= {MEMORY_BOUND_HEADS_X_SQ})", memory, "gbps", MEMORY_BOUND_GBPS,
                    smoke),
        best_target(f"beyond: >= {COMPUTE_BOUND_TFLOPS:.0f} TFLOP/s at {COMPUTE_BOUND_HEADS} heads "
                    "(the best such row)", compute, "tflops", COMPUTE_BOUND_TFLOPS, smoke),
    ]


# --- outputs ----------------------------------------------------------------------------------

def errs_cell(acc, impl):
    errs = [acc.get(f"{impl}_{name}_max_err") for name in ("out", "lse")]
    return "/".join(sci(e) for e in errs if e is not None) or "–"


def mla_markdown(result, impls, title, unit):
    head = ["batch", "s_k", "kind", "keys mean/max", "h_q", "s_q"]
    head += [f"{i} {unit}" for i in impls]
    head += ["FlashMLA ÷ hfa time"]
    head += [f"{i} GB/s" for i in impls] + [f"{i} TFLOP/s" for i in impls]
    clocked = any(r.get("gpu", {}).get(i, {}).get("sm_mhz") for r in result["rows"]
                  for i in impls)
    head += ["SM MHz"] if clocked else []
    head += ["hfa err out/lse", "flashmla err out/lse", "hfa − flashmla out", "accuracy"]
    acc_of = accuracy_of(result)
    body = []
    for r in result["rows"]:
        c, a = r["case"], acc_of(r["case"])
        cells = [str(c["batch"]), str(c["seqlen_k"]), c["kind"],
                 f"{c['keys_mean']:.0f}/{c['keys_max']}", str(c["heads"]), str(c["seqlen_q"])]
        cells += [fmt(r.get(i)) for i in impls]
        cells += [ratio(r.get("flashmla"), r.get("hfa"))]
        cells += [fmt(r.get(f"{i}_gbps")) for i in impls]
        cells += [fmt(r.get(f"{i}_tflops")) for i in impls]
        if clocked:
            cells += [clocks(r, impls)]
        cells += [errs_cell(a, "hfa"), errs_cell(a, "flashmla"),
                  sci(a.get("hfa_vs_flashmla_out_max_diff")),
                  verdict(a) + (f" ({a['note']})" if a.get("note") else "")]
        body.append(cells)
    doc = markdown(title, result, head, body)
    lines = targets_markdown(
        34, result["targets"], "rows",
        lambda t: f"; best {t['best']}, FlashMLA's {t['flashmla_best']}" if "best" in t else "")
    return doc + "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench: needs a CUDA GPU (--device cpu or --smoke: a smoke run)")
    os.makedirs(args.out, exist_ok=True)
    now = utc_now()
    result = new_result(
        "mla", now, args,
        "every sequence vs float64: out within 8e-4 + 2.01/128 * (sum p|v| / sum p), lse "
        "within 1e-6 or 8.01/65536 relative, cosine difference < 5e-6 (FlashMLA's tolerances, "
        "out's taken of each column's magnitude); max errors of the first, longest and last "
        f"sequences (--acc-seqs {args.acc_seqs}); pass: hfa finite, within those tolerances "
        "and each max err <= 2*flashmla err + 1e-5",
        impls=args.impls, page_size=PAGE, d_qk=D_QK, d_v=D_V, softmax_scale=SCALE,
        heads_kv=1, seed=args.seed,
        ragged="max(int(normal(s_k, s_k/2)), max s_q), random.Random(seed)",
        unused_slots="NaN",
        schedule=("each implementation's get_mla_metadata holder filled by a first call "
                  "outside the timing, reused by every timed call" if args.schedule == "kept"
                  else "hfa: no holder, each call makes its schedule; flashmla: its holder "
                       "filled outside the timing"),
        flops="2*h_q*s_q*sum(seqlen_k)*(576+512)",
        cache=("FlashMLA's FP8 records (656 bytes a token) of the bf16 cache, made by "
               "bench_mla.fp8_records" if args.cache == "fp8" else "bf16"),
        bytes=f"sum(seqlen_k)*{656 if args.cache == 'fp8' else '576*2'} + "
              "b*s_q*h_q*(576+512)*2",
        time="us per whole call (first kernel to the combine's end), L2 flushed before each",
        timer=("benchlib.wall_clock_ms" if args.device == "cpu" else
               f"benchlib.kernel_timed_ms, cover {args.cover_us} us" if args.timer == "events"
               else "benchlib.timed_ms (do_bench)"),
        timing="each case twice, --impls in order then reversed; value: mean of the two")
    flash_mla = flashmla_for_run(result, args)
    announce(result)
    gen = torch.Generator(device=args.device)
    gen.manual_seed(args.seed)
    floor = max(args.seqlens_q)
    t0 = time.time()
    bad = 0
    for batch, s_k, kind in itertools.product(args.batches, args.seqlens, args.kinds):
        lens = seqlens_of(batch, s_k, kind, floor, args.seed)
        try:
            cache, table, seqlens = make_cache(lens, args.device, gen)
            records = None
            if args.cache == "fp8":
                records, cache = fp8_records(cache)
            cache_inputs = (cache, table, seqlens, records)
            del cache, records
        except Exception as e:  # noqa: BLE001 - no memory for this cache: the next ones may fit
            print(f"bench: b{batch} s_k {s_k} {kind}: no cache ({type(e).__name__}: {e})",
                  flush=True)
            cache_inputs = None
        for s_q, heads in itertools.product(args.seqlens_q, args.heads):
            case = {"batch": batch, "seqlen_k": s_k, "kind": kind, "heads": heads,
                    "seqlen_q": s_q, "causal": s_q > 1, "keys_mean": round(sum(lens) / batch, 1),
                    "keys_max": max(lens)}

            def run(case=case):
                if cache_inputs is None:
                    raise MemoryError("the cache could not be made")
                return run_case(args, case, lens, cache_inputs, flash_mla, gen)
            bad += record_case(result, run, case, lambda case=case: null_rows(args, case),
                               label, args.impls, t0, device=args.device)
        del cache_inputs
        if args.device == "cuda":
            torch.cuda.empty_cache()
    result["targets"] = target_verdicts(result, smoke=args.device == "cpu")
    for t in result["targets"]:
        print(f"target: {t['target']}: {t['verdict']}"
              + (f" ({t['short']})" if t["short"] else ""), flush=True)

    stem = os.path.join(args.out, f"{now.strftime('%Y-%m-%d')}-mla-{args.tag}")
    title = "MLA decode: hfa vs FlashMLA" + (" (FP8 cache)" if args.cache == "fp8" else "")
    md = mla_markdown(result, args.impls, title, "µs")
    written = write_results(stem, result, md)
    return conclude(result, written, t0, bad, args.strict)


if __name__ == "__main__":
    sys.exit(main())
