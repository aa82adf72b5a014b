"""Context parallelism over real NCCL: ring and Ulysses attention (forward and every gradient)
against one hfa call on the whole sequence and float64, one process a GPU; the varlen ring
against one varlen call, and decode over a KV cache split across the GPUs against one call over
the whole cache.

    scripts/cp_launch.sh                   # torchrun over every GPU torch sees

Every rank builds the same global inputs (one seed), runs on its zigzag or contiguous shard and
compares with its shard of the references, under the emulated tests' bound: max|ours − float64|
≤ 2·max|single call − float64| + 2^-8·max|float64|. Rank 0 prints one line per case; the exit
status is 1 when any rank failed. With fewer than 2 GPUs or processes it says so and exits 0.
Not collected by pytest (not a test_*.py file).
"""

import datetime
import os
import sys


def _single_call(q, k, v, dout, causal):
    import torch
    import hfa
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = hfa.flash_attn_func(q, k, v, causal=causal)
    return (out.detach(),) + torch.autograd.grad(out, (q, k, v), dout)


def _within_bound(name, ours, single, oracle, rank):
    """[] when max|ours - float64| <= 2·max|single call - float64| + 2^-8·max|float64|, else the
    failure message of this rank."""
    err = (ours.double() - oracle).abs().max().item()
    single_err = (single.double() - oracle).abs().max().item()
    bound = 2 * single_err + 2.0 ** -8 * oracle.abs().max().item()
    if err <= bound:  # also catches NaN
        return []
    return [f"rank {rank} {name}: max err {err:.3g} > bound {bound:.3g}"]


def _check_varlen(full, cu, rank, world):
    """Failures of the zigzag varlen ring (causal, sm_margin 8) against one varlen call and
    float64 per sequence. full: q, k, v, dout packed (total, heads, d); cu: global offsets."""
    import torch
    import hfa
    from hfa.distributed import ring_flash_attn_varlen_func, zigzag_shard_varlen
    from torch_reference import float64_attention

    def shard(x):
        return zigzag_shard_varlen(x, cu, rank, world)

    q, k, v = (shard(t).detach().requires_grad_() for t in full[:3])
    local_cu = [c // world for c in cu]
    longest = max(b - a for a, b in zip(local_cu, local_cu[1:]))
    out = ring_flash_attn_varlen_func(q, k, v, local_cu, longest, causal=True, sm_margin=8)
    out.backward(shard(full[3]))
    ours = (out.detach(), q.grad, k.grad, v.grad)
    oracle = [torch.cat([float64_attention(*(t[a:b][None] for t in full), True)[name][0]
                         for a, b in zip(cu, cu[1:])]) for name in ("out", "dq", "dk", "dv")]
    qf, kf, vf = (t.detach().requires_grad_() for t in full[:3])
    offsets = torch.tensor(cu, dtype=torch.int32, device=qf.device)
    longest = max(b - a for a, b in zip(cu, cu[1:]))
    single_out = hfa.flash_attn_varlen_func(qf, kf, vf, offsets, offsets, longest, longest,
                                            causal=True)
    single = (single_out.detach(),) + torch.autograd.grad(single_out, (qf, kf, vf), full[3])
    failures = []
    for name, a, s, o in zip(("out", "dq", "dk", "dv"), ours, single, oracle):
        failures += _within_bound(name, a, shard(s), shard(o), rank)
    return failures


def _check_split_kvcache(rank, world, device):
    """Failures of decode over a cache split across the ranks (token t on rank t % world)
    against one flash_attn_with_kvcache call over the whole cache."""
    import torch
    import hfa
    from hfa.distributed import split_kvcache_attention
    gen = torch.Generator().manual_seed(7)
    lengths = [4000, 3, 1777]
    q, k, v = (torch.randn(shape, generator=gen).to(device, torch.bfloat16)
               for shape in ((3, 1, 32, 128), (3, 4000, 8, 128), (3, 4000, 8, 128)))
    single = hfa.flash_attn_with_kvcache(q, k, v, cache_seqlens=torch.tensor(
        lengths, dtype=torch.int32, device=device))
    mine = [torch.arange(n, device=device)[rank::world] for n in lengths]
    counts = torch.tensor([len(t) for t in mine], dtype=torch.int32, device=device)
    k_part, v_part = (torch.zeros((3, max(1, max(counts.tolist())), 8, 128), dtype=k.dtype,
                                  device=device) for _ in range(2))
    for b, take in enumerate(mine):
        k_part[b, :len(take)], v_part[b, :len(take)] = k[b, take], v[b, take]
    out = split_kvcache_attention(q, k_part, v_part, cache_seqlens=counts, sm_margin=8)
    err = (out.float() - single.float()).abs().max().item()
    bound = 2.0 ** -7 * single.float().abs().max().item()  # two bf16 roundings apart
    return [] if err <= bound else [f"rank {rank} out: max err {err:.3g} > {bound:.3g}"]


def _check_case(function, layout, causal, full, rank, world):
    """Failure messages of one case on this rank (empty: it passed)."""
    from hfa.distributed import zigzag_shard
    from torch_reference import float64_attention

    def shard(x):
        return zigzag_shard(x, rank, world) if layout == "zigzag" else x.chunk(world, 1)[rank]

    q, k, v = (shard(t).detach().requires_grad_() for t in full[:3])
    dout = shard(full[3])
    out = function(q, k, v, causal=causal, layout=layout)
    out.backward(dout)
    ours = (out.detach(), q.grad, k.grad, v.grad)
    reference = float64_attention(*full, causal)
    oracle = [shard(reference[name]) for name in ("out", "dq", "dk", "dv")]
    single = [shard(t) for t in _single_call(*full, causal)]
    failures = []
    for name, a, s, o in zip(("out", "dq", "dk", "dv"), ours, single, oracle):
        failures += _within_bound(name, a, s, o, rank)
    return failures


def _report(what, failures, rank, world, device):
    """Whether every rank passed `what` (a collective: every rank calls it); rank 0 prints."""
    import torch
    import torch.distributed as dist
    count = torch.tensor([len(failures)], device=device)
    dist.all_reduce(count)
    for line in failures:
        print(f"FAIL  {what}: {line}", file=sys.stderr)
    if rank == 0:
        print(f"{'ok   ' if count.item() == 0 else 'FAIL '} {what} (P = {world})")
    return count.item() == 0


def main():
    import torch
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    gpus = torch.cuda.device_count()
    if world < 2 or gpus < 2:
        if rank == 0:
            print(f"nccl_cp_check: found {gpus} GPU(s) and {world} process(es); the NCCL check "
                  f"needs 2 or more of each (scripts/cp_launch.sh starts one process a GPU). "
                  f"Nothing to run.")
        return 0
    if world > gpus:  # every process gets here, before any collective: no hang
        print(f"nccl_cp_check: rank {rank}: {world} processes for {gpus} GPUs; start one "
              f"process a GPU", file=sys.stderr)
        return 1

    import torch.distributed as dist
    import hfa.distributed as cp
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    # A peer that never arrives fails the run after the timeout instead of hanging it.
    dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=5), device_id=device)
    try:
        failed = 0
        cases = [(fn, layout, causal) for fn in ("ring", "ulysses")
                 for layout in ("zigzag", "contiguous") for causal in (False, True)]
        for heads_q, heads_kv in ((8, 8), (8, 2), (8, 1)):
            gen = torch.Generator().manual_seed(heads_kv)
            seqlen = 2 * world * 256
            full = [torch.randn((1, seqlen, h, 128), generator=gen).to(device, torch.bfloat16)
                    for h in (heads_q, heads_kv, heads_kv, heads_q)]
            for name, layout, causal in cases:
                mask = "causal" if causal else "full"
                what = f"{name} {layout} {mask} heads {heads_q}/{heads_kv}"
                if name == "ulysses" and (heads_q % world or heads_kv % world):
                    if rank == 0:
                        print(f"skip  {what}: heads not divisible by {world}")
                    continue
                function = cp.ring_flash_attn_func if name == "ring" else cp.ulysses_flash_attn_func
                failures = _check_case(function, layout, causal, full, rank, world)
                failed += not _report(what, failures, rank, world, device)
            # Varlen: sequences of 3, 1, 0 and 5 zigzag units, odd halves and an empty one.
            cu = [0]
            for units in (3, 1, 0, 5):
                cu.append(cu[-1] + units * 2 * world * 64)
            packed = [torch.randn((cu[-1], h, 128), generator=gen).to(device, torch.bfloat16)
                      for h in (heads_q, heads_kv, heads_kv, heads_q)]
            failures = _check_varlen(packed, cu, rank, world)
            failed += not _report(f"ring varlen zigzag causal heads {heads_q}/{heads_kv}",
                                  failures, rank, world, device)
        failures = _check_split_kvcache(rank, world, device)
        failed += not _report("split KV cache decode", failures, rank, world, device)
        if rank == 0:
            print(f"nccl_cp_check: {failed} case(s) failed" if failed
                  else "nccl_cp_check: all passed")
        return 1 if failed else 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
