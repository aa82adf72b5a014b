"""P ranks in one process, without torch.distributed: for tests on one GPU (or the CPU).

Each rank runs the same per-rank code as over NCCL (ring.ring_forward/ring_backward,
ring_varlen.ring_varlen_forward/backward, ulysses.ulysses_forward/ulysses_backward,
kvcache.split_kvcache_attention) in its own thread, against a communicator whose
collectives meet at a barrier and exchange tensors through a shared mailbox. Every collective
completes inside the call, in the order the ranks make them, so a run is deterministic.
The functions here take and return lists with one tensor per rank; the attention ones are
differentiable:
one autograd node runs all ranks' forwards, and its backward all ranks' backwards (the autograd
engine runs a device's backward on one thread, where P threads waiting at a barrier for each
other would deadlock).

    outs = emulated.ring_flash_attn_func(q_shards, k_shards, v_shards, causal=True)
    outs = emulated.split_kvcache_attention(q, k_parts, v_parts,
                                            per_rank=[{"cache_seqlens": n} for n in lengths])
"""

import threading

import torch

from hfa import _args

from . import kvcache, ring, ring_varlen, ulysses

_BARRIER_TIMEOUT_S = 600  # a rank that never arrives (a bug) fails the run instead of hanging

# Whether a shift hands the receiver its own copy, as NCCL's transfer does. On P GPUs that
# copy is the transfer, beside the compute; on one GPU it runs in line with it. bench_cp.py
# turns it off to time the ring's own work without the copies. Off is safe for the rings only:
# their ranks never write a tensor after shifting it.
SHIFT_COPIES = True


class _Done:
    def __init__(self, received):
        self._received = received

    def wait(self):
        return self._received


class _World:
    def __init__(self, world):
        self.world = world
        self.barrier = threading.Barrier(world, timeout=_BARRIER_TIMEOUT_S)
        self.mailbox = [None] * world


class EmulatedComm:
    """Rank `rank` of a _World: the communicator interface of hfa.distributed._comm."""

    def __init__(self, world, rank):
        self._world = world
        self.rank = rank
        self.world = world.world

    def _exchange(self, item):
        """Everyone's item, once every rank has posted its own."""
        world = self._world
        world.mailbox[self.rank] = item
        world.barrier.wait()
        items = list(world.mailbox)
        world.barrier.wait()  # nobody posts the next item before all have read this one
        return items

    @staticmethod
    def _copy(t):
        # What a receiver gets over NCCL: its own contiguous buffer.
        return t.clone(memory_format=torch.contiguous_format)

    def shift(self, tensors):
        items = self._exchange([self._copy(t) if SHIFT_COPIES else t for t in tensors])
        return _Done(items[(self.rank - 1) % self.world])

    def all_to_all(self, chunks):
        items = self._exchange([self._copy(c) for c in chunks])
        return [items[src][self.rank] for src in range(self.world)]

    def all_gather(self, tensor):
        items = self._exchange(self._copy(tensor))
        return [self._copy(t) for t in items]  # each receiver its own buffers, as over NCCL


def run_ranks(function, per_rank_args):
    """[function(comm_r, *per_rank_args[r]) for every rank r], each rank in its own thread,
    under no_grad and on the caller's CUDA stream (so the threads' kernels keep the order the
    barriers give them)."""
    world = _World(len(per_rank_args))
    results = [None] * world.world
    errors = []
    stream = torch.cuda.current_stream() if torch.cuda.is_available() else None

    def body(rank):
        try:
            with torch.no_grad():
                if stream is not None:
                    with torch.cuda.stream(stream):
                        results[rank] = function(EmulatedComm(world, rank), *per_rank_args[rank])
                else:
                    results[rank] = function(EmulatedComm(world, rank), *per_rank_args[rank])
        except BaseException as e:  # noqa: BLE001 (re-raised below, in the caller's thread)
            errors.append(e)
            world.barrier.abort()  # the other ranks stop waiting for this one

    threads = [threading.Thread(target=body, args=(r,), name=f"hfa-emulated-rank-{r}")
               for r in range(world.world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        # The first error that is not another rank's broken barrier is the cause.
        raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)),
                   errors[0])
    return results


def _check_lists(qs, ks, vs):
    qs, ks, vs = list(qs), list(ks), list(vs)
    if not qs:
        raise ValueError("qs: expected one tensor per rank, got none")
    if len(ks) != len(qs) or len(vs) != len(qs):
        raise ValueError(f"ks, vs: expected {len(qs)} tensors each (one per rank, as qs), got "
                         f"{len(ks)} and {len(vs)}")
    for name, shards in (("qs", qs), ("ks", ks), ("vs", vs)):
        if any(t.shape != shards[0].shape for t in shards):
            raise ValueError(f"{name}: every rank must hold the same shape, got "
                             f"{[tuple(t.shape) for t in shards]}")
    return qs, ks, vs


# The per-rank steps of a ring: (forward(comm, q, k, v, *options) -> (out, lse),
# backward(comm, dout, q, k, v, out, lse, *options) -> (dq, dk, dv)).
_FIXED_LENGTH = (ring.ring_forward, ring.ring_backward)
_VARLEN = (ring_varlen.ring_varlen_forward, ring_varlen.ring_varlen_backward)


class _EmulatedRing(torch.autograd.Function):
    @staticmethod
    def forward(ctx, steps, options, *shards):
        world = len(shards) // 3
        qs, ks, vs = (tuple(t.contiguous() for t in shards[i * world:(i + 1) * world])
                      for i in range(3))
        results = run_ranks(lambda comm, q, k, v: steps[0](comm, q, k, v, *options),
                            list(zip(qs, ks, vs)))
        outs = [out.to(q.dtype) for (out, _), q in zip(results, qs)]
        lses = [lse for _, lse in results]
        ctx.save_for_backward(*qs, *ks, *vs, *outs, *lses)
        ctx.steps, ctx.options, ctx.world = steps, options, world
        ctx.mark_non_differentiable(*lses)
        return (*outs, *lses)

    @staticmethod
    def backward(ctx, *grads):
        world = ctx.world
        saved = ctx.saved_tensors
        qs, ks, vs, outs, lses = (saved[i * world:(i + 1) * world] for i in range(5))
        douts = [g.contiguous() for g in grads[:world]]
        results = run_ranks(
            lambda comm, *a: ctx.steps[1](comm, *a, *ctx.options),
            list(zip(douts, qs, ks, vs, outs, lses)))
        dqs, dks, dvs = zip(*results)
        return (None, None, *dqs, *dks, *dvs)


def ring_flash_attn_func(qs, ks, vs, causal=False, softmax_scale=None, layout="zigzag",
                         return_attn_probs=False, sm_margin=0):
    """hfa.distributed.ring_flash_attn_func over len(qs) emulated ranks: qs[r], ks[r], vs[r]
    are rank r's shards. Returns the list of outs (and the list of lses with
    return_attn_probs)."""
    qs, ks, vs = _check_lists(qs, ks, vs)
    ring.check_ring_args(qs[0], ks[0], vs[0], len(qs), layout)
    options = (softmax_scale, bool(causal), layout, _args.sm_margin(sm_margin))
    results = _EmulatedRing.apply(_FIXED_LENGTH, options, *qs, *ks, *vs)
    outs, lses = list(results[:len(qs)]), list(results[len(qs):])
    return (outs, lses) if return_attn_probs else outs


def ring_flash_attn_varlen_func(qs, ks, vs, cu_seqlens, max_seqlen, causal=False,
                                softmax_scale=None, layout="zigzag", return_attn_probs=False,
                                sm_margin=0):
    """hfa.distributed.ring_flash_attn_varlen_func over len(qs) emulated ranks: qs[r], ks[r],
    vs[r] are rank r's (total_local, heads, headdim) shards, cu_seqlens the local offsets every
    rank shares. Returns the list of outs (and the list of (heads_q, total_local) lses with
    return_attn_probs)."""
    qs, ks, vs = _check_lists(qs, ks, vs)
    ring_varlen.check_varlen_args(qs[0], ks[0], vs[0], cu_seqlens, max_seqlen, len(qs), layout)
    shard = ring_varlen.VarlenShard(ring_varlen.on_device(cu_seqlens, qs[0].device),
                                    int(max_seqlen))
    options = (shard, softmax_scale, bool(causal), layout, _args.sm_margin(sm_margin))
    results = _EmulatedRing.apply(_VARLEN, options, *qs, *ks, *vs)
    outs, lses = list(results[:len(qs)]), list(results[len(qs):])
    return (outs, lses) if return_attn_probs else outs


def split_kvcache_attention(q, k_caches, v_caches, per_rank=None, return_softmax_lse=False,
                            **kvcache_kwargs):
    """hfa.distributed.split_kvcache_attention over len(k_caches) emulated ranks: rank r holds
    k_caches[r], v_caches[r] and the keywords per_rank[r] (a dict: its cache_seqlens,
    page_table...) on top of kvcache_kwargs; q is every rank's queries. Returns the list of the
    ranks' outs (each (out, lse) with return_softmax_lse)."""
    k_caches, v_caches = list(k_caches), list(v_caches)
    per_rank = list(per_rank) if per_rank is not None else [{}] * len(k_caches)
    if not k_caches or len(v_caches) != len(k_caches) or len(per_rank) != len(k_caches):
        raise ValueError(f"k_caches, v_caches, per_rank: expected one each per rank, got "
                         f"{len(k_caches)}, {len(v_caches)} and {len(per_rank)}")

    def rank_call(comm, k_cache, v_cache, own):
        return kvcache.split_kvcache_attention(q, k_cache, v_cache, group=comm,
                                               return_softmax_lse=return_softmax_lse,
                                               **kvcache_kwargs, **own)

    return run_ranks(rank_call, list(zip(k_caches, v_caches, per_rank)))


class _EmulatedUlysses(torch.autograd.Function):
    @staticmethod
    def forward(ctx, options, *shards):
        world = len(shards) // 3
        results = run_ranks(
            lambda comm, q, k, v: ulysses.ulysses_forward(comm, q, k, v, *options),
            [shards[r::world] for r in range(world)])
        ctx.save_for_backward(*(t for _, saved in results for t in saved))
        ctx.options, ctx.world = options, world
        return tuple(out for out, _ in results)

    @staticmethod
    def backward(ctx, *douts):
        world = ctx.world
        saved = ctx.saved_tensors
        per_rank = len(saved) // world
        results = run_ranks(
            lambda comm, dout, saved_r: ulysses.ulysses_backward(comm, dout, saved_r,
                                                                 *ctx.options),
            [(douts[r].contiguous(), saved[r * per_rank:(r + 1) * per_rank])
             for r in range(world)])
        dqs, dks, dvs = zip(*results)
        return (None, *dqs, *dks, *dvs)


def ulysses_flash_attn_func(qs, ks, vs, causal=False, softmax_scale=None, layout="zigzag",
                            sm_margin=0):
    """hfa.distributed.ulysses_flash_attn_func over len(qs) emulated ranks; returns the outs."""
    qs, ks, vs = _check_lists(qs, ks, vs)
    ulysses.check_ulysses_args(qs[0], ks[0], vs[0], len(qs), layout)
    options = (softmax_scale, bool(causal), layout, _args.sm_margin(sm_margin))
    return list(_EmulatedUlysses.apply(options, *qs, *ks, *vs))
