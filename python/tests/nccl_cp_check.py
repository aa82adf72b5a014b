"""Context parallelism over real NCCL: ring and Ulysses attention (forward and every gradient)
against one hfa call on the whole sequence and float64, one process a GPU.

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
        err = (a.double() - o).abs().max().item()
        bound = 2 * (s.double() - o).abs().max().item() + 2.0 ** -8 * o.abs().max().item()
        if not err <= bound:  # also catches NaN
            failures.append(f"rank {rank} {name}: max err {err:.3g} > bound {bound:.3g}")
    return failures


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
                count = torch.tensor([len(failures)], device=device)
                dist.all_reduce(count)
                for line in failures:
                    print(f"FAIL  {what}: {line}", file=sys.stderr)
                if rank == 0:
                    print(f"{'ok   ' if count.item() == 0 else 'FAIL '} {what} (P = {world})")
                failed += int(count.item() > 0)
        if rank == 0:
            print(f"nccl_cp_check: {failed} case(s) failed" if failed
                  else "nccl_cp_check: all passed")
        return 1 if failed else 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
