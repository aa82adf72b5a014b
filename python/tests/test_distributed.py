"""Context parallelism (hfa.distributed) with emulated ranks (hfa.distributed.emulated): ring and
Ulysses attention over world sizes 1-8, forward and every gradient, against one hfa call on the
whole sequence and against float64 attention (torch autograd). On the CPU in float32 and, where
torch sees a GPU and libhfa has CUDA, in bfloat16. The bound: max|ours − float64| ≤
2·max|single call − float64| + floor (the floor: one rounding of the partial results), and the
error at P = 8 must stay within 1.5× the error at P = 2 (+ a small floor). The NCCL path runs in
nccl_cp_check.py (scripts/cp_launch.sh)."""


import pytest

torch = pytest.importorskip(
    "torch", minversion="2.4",
    reason="torch is not installed: context parallelism (hfa.distributed) is untested here")

import hfa  # noqa: E402  (after the importorskip on purpose)
from torch_devices import DEVICES  # noqa: E402
from torch_reference import GRADS, float64_attention  # noqa: E402
from hfa.distributed import (emulated, merge_attn_partial, zigzag_positions,  # noqa: E402
                             zigzag_shard, zigzag_unshard)


# Per device: dtype, tokens per zigzag chunk (seqlen = 2P·chunk), headdim. The CPU shapes are
# small to keep the CPU backend quick.
CONFIG = {"cpu": (torch.float32, 16, 64), "cuda": (torch.bfloat16, 128, 128)}
# The part of max|float64| a result may be off beyond 2× the single call's error: one rounding
# of the partials (a bf16 ulp), or fp32 noise.
FLOOR = {torch.float32: 1e-5, torch.bfloat16: 2.0 ** -8}
HEADS = [pytest.param((8, 8), id="mha"), pytest.param((8, 2), id="gqa"),
         pytest.param((8, 1), id="mqa")]


def _inputs(device, world, heads, seed=0):
    dtype, chunk, headdim = CONFIG[device]
    heads_q, heads_kv = heads
    seqlen = 2 * world * chunk
    gen = torch.Generator().manual_seed(seed)

    def rand(h):
        return torch.randn((2, seqlen, h, headdim), generator=gen).to(device, dtype)

    return rand(heads_q), rand(heads_kv), rand(heads_kv), rand(heads_q)


def _single_call(q, k, v, dout, causal):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out, lse = hfa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    return dict(out=out.detach(), lse=lse, **dict(zip(GRADS, grads)))


def _shard(x, world, layout, dim=1):
    if layout == "zigzag":
        return [zigzag_shard(x, r, world, dim) for r in range(world)]
    return list(x.chunk(world, dim))


def _unshard(shards, layout, dim=1):
    return zigzag_unshard(shards, dim) if layout == "zigzag" else torch.cat(shards, dim)


def _emulated(function, q, k, v, dout, world, causal, layout):
    """out, (lse,) dq, dk, dv of `function` over `world` emulated ranks, unsharded."""
    qs, ks, vs = ([t.detach().requires_grad_() for t in _shard(x, world, layout)]
                  for x in (q, k, v))
    result = {}
    if function is emulated.ring_flash_attn_func:
        outs, lses = function(qs, ks, vs, causal=causal, layout=layout, return_attn_probs=True)
        result["lse"] = _unshard(lses, layout, dim=2)
    else:
        outs = function(qs, ks, vs, causal=causal, layout=layout)
    torch.autograd.backward(outs, _shard(dout, world, layout))
    result["out"] = _unshard([o.detach() for o in outs], layout)
    for name, shards in zip(GRADS, (qs, ks, vs)):
        result[name] = _unshard([t.grad for t in shards], layout)
    return result


def _err(a, b):
    assert not torch.isnan(a).any(), "NaN in the result"
    return (a.double() - b).abs().max().item()


def _check(ours, single, oracle, dtype, names=("out",) + GRADS):
    for name in names:
        scale = oracle[name].abs().max().item()
        err, single_err = _err(ours[name], oracle[name]), _err(single[name], oracle[name])
        bound = 2 * single_err + FLOOR[dtype] * scale
        assert err <= bound, (f"{name}: max err {err:.3g} > bound {bound:.3g} (single call "
                              f"{single_err:.3g}, max|{name}| {scale:.3g})")


# --- the zigzag helpers and the merge ---------------------------------------------------------

@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_zigzag_round_trip_and_positions(world):
    seqlen = 2 * world * 3
    x = torch.arange(2 * seqlen).reshape(2, seqlen)
    shards = [zigzag_shard(x, r, world) for r in range(world)]
    assert torch.equal(zigzag_unshard(shards), x)
    for r, shard in enumerate(shards):
        positions = zigzag_positions(seqlen, r, world)
        assert positions.dtype == torch.int64
        assert torch.equal(shard, x[:, positions])  # the positions name the shard's tokens
    # Rank 0 of 2 over 8 tokens: chunks 0 and 3 of 4.
    assert zigzag_positions(8, 0, 2).tolist() == [0, 1, 6, 7]
    assert zigzag_positions(8, 1, 2).tolist() == [2, 3, 4, 5]


def test_zigzag_errors():
    x = torch.zeros(1, 10, 2, 4)
    with pytest.raises(ValueError, match="2 \\* world = 4"):
        zigzag_shard(x, 0, 2)
    with pytest.raises(ValueError, match="rank"):
        zigzag_shard(torch.zeros(1, 8, 2, 4), 2, 2)
    with pytest.raises(ValueError, match="world"):
        zigzag_positions(8, 0, 0)
    with pytest.raises(ValueError, match="seqlen"):
        zigzag_positions(10, 0, 2)
    with pytest.raises(ValueError, match="shards\\[0\\]"):
        zigzag_unshard([torch.zeros(1, 3)])


def _masked_attention(q, k, v, seen):
    """float64 (out (b, s, h, d), lse (b, h, s)) over the keys `seen` (s, keys) marks; a row
    that sees no key gets out 0 and lse -inf."""
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k).masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(scores, -1)
    probs = torch.exp(scores - torch.where(torch.isneginf(lse), 0.0, lse)[..., None])
    return torch.einsum("bhqk,bkhd->bqhd", probs, v), lse


def test_merge_with_fully_masked_rows():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, n, 2, 8, generator=gen, dtype=torch.float64)
               for n in (6, 9, 9))
    seen = torch.rand(6, 9, generator=gen) < 0.6
    seen[:, 0] = seen[:, 5] = True
    seen[1, :5] = False  # row 1 sees nothing of part A (keys 0-4)
    seen[2, 5:] = False  # row 2 nothing of part B (keys 5-8)
    seen[3, :] = False   # row 3 nothing at all
    parts = [_masked_attention(q, k[:, s], v[:, s], seen[:, s])
             for s in (slice(0, 5), slice(5, 9))]
    out = torch.zeros(1, 6, 2, 8, dtype=torch.float32)
    lse = torch.full((1, 2, 6), float("-inf"))
    for out_part, lse_part in parts:  # the first merge starts from the empty state
        merge_attn_partial(out, lse, out_part.float(), lse_part.float())
    want_out, want_lse = _masked_attention(q, k, v, seen)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert torch.isneginf(lse[:, :, 3]).all() and (out[:, 3] == 0).all()
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse))
    finite = ~torch.isneginf(want_lse)
    assert (lse.double() - want_lse)[finite].abs().max() < 1e-5
    assert (out.double() - want_out).abs().max() < 1e-5
    # Merging in a part that is masked everywhere changes nothing.
    before_out, before_lse = out.clone(), lse.clone()
    merge_attn_partial(out, lse, torch.zeros_like(out), torch.full_like(lse, float("-inf")))
    assert torch.equal(out, before_out) and torch.equal(lse, before_lse)


# --- ring and Ulysses against one call and float64 --------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_ring(device, world, causal, layout, heads):
    q, k, v, dout = _inputs(device, world, heads)
    oracle = float64_attention(q, k, v, dout, causal)
    single = _single_call(q, k, v, dout, causal)
    ring = _emulated(emulated.ring_flash_attn_func, q, k, v, dout, world, causal, layout)
    dtype = CONFIG[device][0]
    _check(ring, single, oracle, dtype)
    lse_err = (ring["lse"].double() - oracle["lse"]).abs().max().item()
    assert lse_err <= 2 * (single["lse"].double() - oracle["lse"]).abs().max().item() + 1e-4


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads,world", [((8, 8), 2), ((8, 8), 4), ((8, 8), 8), ((8, 2), 2),
                                         ((16, 8), 8)], ids=["mha2", "mha4", "mha8", "gqa2",
                                                             "gqa8"])
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_ulysses(device, heads, world, causal, layout):
    q, k, v, dout = _inputs(device, world, heads)
    oracle = float64_attention(q, k, v, dout, causal)
    single = _single_call(q, k, v, dout, causal)
    ulysses = _emulated(emulated.ulysses_flash_attn_func, q, k, v, dout, world, causal, layout)
    _check(ulysses, single, oracle, CONFIG[device][0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads", HEADS)
def test_ring_error_does_not_grow_with_world_size(device, heads):
    # One problem (the seqlen of P = 8) split over 2 and over 8 ranks.
    dtype, chunk, headdim = CONFIG[device]
    q, k, v, dout = _inputs(device, 8, heads, seed=2)
    oracle = float64_attention(q, k, v, dout, True)
    errors = {world: _emulated(emulated.ring_flash_attn_func, q, k, v, dout, world, True,
                               "zigzag") for world in (2, 8)}
    for name in ("out",) + GRADS:
        err2, err8 = (_err(errors[w][name], oracle[name]) for w in (2, 8))
        floor = FLOOR[dtype] / 4 * oracle[name].abs().max().item()
        assert err8 <= 1.5 * err2 + floor, f"{name}: err at P=8 {err8:.3g}, at P=2 {err2:.3g}"


# --- arguments ----------------------------------------------------------------------------------

def test_argument_errors():
    q = torch.zeros(1, 8, 8, 64)
    kv = torch.zeros(1, 8, 2, 64)
    with pytest.raises(ValueError, match="layout"):
        emulated.ring_flash_attn_func([q, q], [kv, kv], [kv, kv], layout="striped")
    odd = torch.zeros(1, 7, 8, 64)
    with pytest.raises(ValueError, match="odd local seqlen"):
        emulated.ring_flash_attn_func([odd], [odd], [odd])
    with pytest.raises(ValueError, match="same local seqlen"):
        emulated.ring_flash_attn_func([q], [kv[:, :4]], [kv[:, :4]])
    with pytest.raises(ValueError, match="ks, vs"):
        emulated.ring_flash_attn_func([q, q], [kv], [kv, kv])
    with pytest.raises(ValueError, match="heads_kv = 2"):
        emulated.ulysses_flash_attn_func([q] * 4, [kv] * 4, [kv] * 4)
    with pytest.raises(ValueError, match="heads_q = 8"):
        emulated.ulysses_flash_attn_func([q] * 3, [q] * 3, [q] * 3)


def test_a_failing_rank_raises_instead_of_hanging():
    # Rank 1 fails before its collective; the others, waiting for it at the barrier, must be
    # released and the caller get rank 1's error.
    def body(comm, x):
        if comm.rank == 1:
            raise RuntimeError("rank 1 failed")
        return comm.shift([x]).wait()

    with pytest.raises(RuntimeError, match="rank 1 failed"):
        emulated.run_ranks(body, [(torch.zeros(2),) for _ in range(3)])


def test_emulated_shift_and_all_to_all():
    def body(comm, x):
        shifted = comm.shift([x]).wait()[0]
        exchanged = comm.all_to_all([x + 10 * j for j in range(comm.world)])
        return shifted, exchanged

    results = emulated.run_ranks(body, [(torch.tensor([float(r)]),) for r in range(4)])
    for r, (shifted, exchanged) in enumerate(results):
        assert shifted.item() == (r - 1) % 4  # from the previous rank
        assert [t.item() for t in exchanged] == [src + 10 * r for src in range(4)]
