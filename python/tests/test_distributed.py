"""Context parallelism (hfa.distributed) with emulated ranks (hfa.distributed.emulated): ring and
Ulysses attention over world sizes 1-8, forward and every gradient, against one hfa call on the
whole sequence and against float64 attention (torch autograd); the varlen ring (odd halves, an
empty sequence) against one varlen call and float64 per sequence; decode over a KV cache split
across the ranks (ranges, interleaved tokens, empty parts) against one call over the whole cache. On the CPU in float32 and, where
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
from hfa.distributed import (emulated, merge_attn_partial, merge_attn_partials,  # noqa: E402
                             zigzag_positions, zigzag_positions_varlen, zigzag_shard,
                             zigzag_shard_varlen, zigzag_unshard, zigzag_unshard_varlen)
from hfa.distributed import ring as ring_module  # noqa: E402
from hfa.distributed.ring import merge_attn_partial_torch  # noqa: E402


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


def test_merge_of_many_partials():
    # More partials than one hfa.merge_partials call takes (15 beside the running result):
    # merged in chunks, the same as one at a time in torch.
    gen = torch.Generator().manual_seed(7)
    outs = [torch.randn(1, 5, 2, 8, generator=gen) for _ in range(20)]
    lses = [torch.randn(1, 2, 5, generator=gen) for _ in range(20)]
    lses[3][:, :, 1] = float("-inf")  # a row one partial does not see
    out, lse = torch.zeros(1, 5, 2, 8), torch.full((1, 2, 5), float("-inf"))
    merge_attn_partials(out, lse, outs, lses)
    want, want_lse = torch.zeros(1, 5, 2, 8), torch.full((1, 2, 5), float("-inf"))
    for o, l in zip(outs, lses):
        merge_attn_partial_torch(want, want_lse, o, l)
    assert (out - want).abs().max() < 1e-5 and (lse - want_lse).abs().max() < 1e-5


# --- ring and Ulysses against one call and float64 --------------------------------------------

@pytest.fixture(params=[False, True], ids=["merge-pass", "in-kernel"])
def merge_mode(request, monkeypatch):
    """Both ways a ring step's result reaches the running (O, LSE), and its backward gets D
    (hfa.distributed.ring.ACCUMULATE_IN_KERNEL)."""
    monkeypatch.setattr(ring_module, "ACCUMULATE_IN_KERNEL", request.param)
    return request.param


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_ring(device, world, causal, layout, heads, merge_mode):
    q, k, v, dout = _inputs(device, world, heads)
    oracle = float64_attention(q, k, v, dout, causal)
    single = _single_call(q, k, v, dout, causal)
    ring = _emulated(emulated.ring_flash_attn_func, q, k, v, dout, world, causal, layout)
    dtype = CONFIG[device][0]
    _check(ring, single, oracle, dtype)
    lse_err = (ring["lse"].double() - oracle["lse"]).abs().max().item()
    assert lse_err <= 2 * (single["lse"].double() - oracle["lse"]).abs().max().item() + 1e-4


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_ring_without_shift_copies_is_the_same(device, causal, layout, monkeypatch):
    """emulated.SHIFT_COPIES = False (bench_cp.py's ring_split without the receive copies) is
    safe for the rings: the same results as with copies, fixed length and varlen. The same
    bytes on the CPU and for the GPU's forward. The GPU's default backward adds dQ's partials,
    and with GQA a group's dK and dV, in any order, so a ring step's bf16 gradient may land one
    ulp apart, and the steps' sum keeps that ulp of the largest step even where the steps
    cancel: the gradients agree within 2^-7 of the tensor's largest value (a shift that aliases
    a buffer moves whole values)."""
    world, heads = 4, (8, 2)
    q, k, v, dout = _inputs(device, world, heads)
    cu, vq, vk, vv, vdout = _varlen_inputs(device, world, heads, layout)
    runs = []
    for copies in (True, False):
        monkeypatch.setattr(emulated, "SHIFT_COPIES", copies)
        runs.append((_emulated(emulated.ring_flash_attn_func, q, k, v, dout, world, causal,
                               layout),
                     _varlen_ring(vq, vk, vv, vdout, cu, world, causal, layout)))
    for with_copies, without in zip(*runs):
        for name, expected in with_copies.items():
            if device == "cpu" or name in ("out", "lse"):
                assert torch.equal(without[name], expected), name
            else:
                scale = expected.abs().max().item()
                torch.testing.assert_close(without[name], expected, rtol=2.0 ** -7,
                                           atol=2.0 ** -7 * scale,
                                           msg=lambda detail, name=name: f"{name}: {detail}")


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
def test_ring_error_does_not_grow_with_world_size(device, heads, merge_mode):
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


def test_emulated_all_gather():
    def body(comm, x):
        return comm.all_gather(x * (comm.rank + 1))

    results = emulated.run_ranks(body, [(torch.ones(2),) for _ in range(3)])
    for gathered in results:
        assert [t[0].item() for t in gathered] == [1.0, 2.0, 3.0]
    assert results[0][0] is not results[1][0]  # every rank its own buffers


# --- sm_margin ----------------------------------------------------------------------------------

def zigzag_shard_all(x, world, dim=1):
    return [zigzag_shard(x, r, world, dim) for r in range(world)]


def test_sm_margin_reaches_every_step():
    # The CPU ignores a margin (the GPU tests show it changes no bit there either), so the
    # result is the same bits; a negative one is the library's error, from a step's call.
    q, k, v, dout = _inputs("cpu", 2, (8, 2))
    ring = _emulated(emulated.ring_flash_attn_func, q, k, v, dout, 2, True, "zigzag")
    qs, ks, vs = ([t.detach().requires_grad_() for t in zigzag_shard_all(x, 2)]
                  for x in (q, k, v))
    outs = emulated.ring_flash_attn_func(qs, ks, vs, causal=True, sm_margin=4)
    torch.autograd.backward(outs, zigzag_shard_all(dout, 2))
    assert torch.equal(zigzag_unshard([o.detach() for o in outs]), ring["out"])
    assert torch.equal(zigzag_unshard([t.grad for t in qs]), ring["dq"])
    with pytest.raises(ValueError, match="^sm_margin: must be >= 0"):
        emulated.ring_flash_attn_func(qs, ks, vs, causal=True, sm_margin=-1)
    with pytest.raises(TypeError, match="^sm_margin: expected an integer"):
        emulated.ulysses_flash_attn_func(qs, ks, vs, sm_margin=0.5)


# --- varlen ring ---------------------------------------------------------------------------------

# Chunks per sequence in units of the layout's split (2P for zigzag, P for contiguous): odd
# counts give odd local halves (zigzag) or odd local lengths (contiguous); 0 an empty sequence.
VARLEN_UNITS = [3, 1, 0, 5]


def _varlen_inputs(device, world, heads, layout, seed=3):
    dtype, chunk, headdim = CONFIG[device]
    unit = (2 if layout == "zigzag" else 1) * world
    lengths = [n * unit * max(1, chunk // 8) for n in VARLEN_UNITS]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    gen = torch.Generator().manual_seed(seed)

    def rand(h):
        return torch.randn((cu[-1], h, headdim), generator=gen).to(device, dtype)

    heads_q, heads_kv = heads
    return cu, rand(heads_q), rand(heads_kv), rand(heads_kv), rand(heads_q)


def _varlen_shard(x, cu, rank, world, layout):
    if layout == "zigzag":
        return zigzag_shard_varlen(x, cu, rank, world)
    return torch.cat([x[a:b].chunk(world)[rank] if b > a else x[a:a]
                      for a, b in zip(cu, cu[1:])])


def _varlen_unshard(shards, cu, layout, dim=0):
    if layout == "zigzag":
        return zigzag_unshard_varlen(shards, cu, dim)
    world, start, pieces = len(shards), 0, []
    for a, b in zip(cu, cu[1:]):
        n = (b - a) // world
        pieces += [s.narrow(dim, start, n) for s in shards]
        start += n
    return torch.cat(pieces, dim)


def _per_sequence(function, cu, *tensors):
    """function(*(t[a:b][None] for t in tensors)) for each sequence, its results concatenated
    along the token dim (out, grads) or the last one (lse)."""
    parts = [function(*(t[a:b][None] for t in tensors)) for a, b in zip(cu, cu[1:])]
    return {name: torch.cat([p[name][0] for p in parts], -1 if name == "lse" else 0)
            for name in parts[0]}


def _varlen_single_call(q, k, v, dout, cu, causal):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    offsets = torch.tensor(cu, dtype=torch.int32, device=q.device)
    longest = max(b - a for a, b in zip(cu, cu[1:]))
    out, lse = hfa.flash_attn_varlen_func(q, k, v, offsets, offsets, longest, longest,
                                          causal=causal, return_attn_probs=True)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    return dict(out=out.detach(), lse=lse, **dict(zip(GRADS, grads)))


def _varlen_ring(q, k, v, dout, cu, world, causal, layout):
    """out, lse, dq, dk, dv of the emulated varlen ring, unsharded."""
    qs, ks, vs = ([_varlen_shard(x, cu, r, world, layout).detach().requires_grad_()
                   for r in range(world)] for x in (q, k, v))
    local_cu = [c // world for c in cu]
    longest = max(b - a for a, b in zip(local_cu, local_cu[1:]))
    outs, lses = emulated.ring_flash_attn_varlen_func(
        qs, ks, vs, torch.tensor(local_cu, dtype=torch.int32), longest, causal=causal,
        layout=layout, return_attn_probs=True)
    assert lses[0].shape == (q.shape[1], qs[0].shape[0])
    torch.autograd.backward(outs, [_varlen_shard(dout, cu, r, world, layout)
                                   for r in range(world)])
    result = dict(out=_varlen_unshard([o.detach() for o in outs], cu, layout),
                  lse=_varlen_unshard(lses, cu, layout, dim=1))
    for name, shards in zip(GRADS, (qs, ks, vs)):
        result[name] = _varlen_unshard([t.grad for t in shards], cu, layout)
    return result


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_ring_varlen(device, world, causal, layout, heads, merge_mode):
    cu, q, k, v, dout = _varlen_inputs(device, world, heads, layout)
    oracle = _per_sequence(lambda *t: float64_attention(*t, causal), cu, q, k, v, dout)
    single = _varlen_single_call(q, k, v, dout, cu, causal)
    ring = _varlen_ring(q, k, v, dout, cu, world, causal, layout)
    _check(ring, single, oracle, CONFIG[device][0])
    finite = ~torch.isneginf(oracle["lse"])  # the empty sequence has no rows at all
    lse_err = (ring["lse"].double() - oracle["lse"])[finite].abs().max().item()
    single_err = (single["lse"].double() - oracle["lse"])[finite].abs().max().item()
    assert lse_err <= 2 * single_err + 1e-4


@pytest.mark.parametrize("device", DEVICES)
def test_ring_varlen_error_does_not_grow_with_world_size(device, merge_mode):
    cu, q, k, v, dout = _varlen_inputs(device, 8, (8, 2), "zigzag", seed=4)
    oracle = _per_sequence(lambda *t: float64_attention(*t, True), cu, q, k, v, dout)
    errors = {world: _varlen_ring(q, k, v, dout, cu, world, True, "zigzag") for world in (2, 8)}
    dtype = CONFIG[device][0]
    for name in ("out",) + GRADS:
        err2, err8 = (_err(errors[w][name], oracle[name]) for w in (2, 8))
        floor = FLOOR[dtype] / 4 * oracle[name].abs().max().item()
        assert err8 <= 1.5 * err2 + floor, f"{name}: err at P=8 {err8:.3g}, at P=2 {err2:.3g}"


def test_zigzag_varlen_helpers():
    cu = [0, 8, 8, 20]  # sequences of 8, 0 and 12 tokens over 2 ranks (chunks of 2, 0, 3)
    x = torch.arange(20)
    shards = [zigzag_shard_varlen(x, cu, r, 2) for r in range(2)]
    assert shards[0].tolist() == [0, 1, 6, 7, 8, 9, 10, 17, 18, 19]
    assert torch.equal(zigzag_unshard_varlen(shards, cu), x)
    assert zigzag_positions_varlen(cu, 1, 2).tolist() == [2, 3, 4, 5, 3, 4, 5, 6, 7, 8]
    starts = torch.tensor([0] * 4 + [8] * 6)  # each shard: 4 tokens of sequence 0, 6 of 2
    for r, shard in enumerate(shards):  # positions name each token within its sequence
        assert torch.equal(shard - starts, zigzag_positions_varlen(cu, r, 2))
    with pytest.raises(ValueError, match="sequence 0 has 6 tokens"):
        zigzag_shard_varlen(torch.arange(6), [0, 6], 0, 2)


def test_ring_varlen_argument_errors():
    q = torch.zeros(16, 4, 64)
    kv = torch.zeros(16, 2, 64)
    cu = torch.tensor([0, 6, 16], dtype=torch.int32)
    with pytest.raises(ValueError, match="local sequence 0 has 5 tokens"):
        emulated.ring_flash_attn_varlen_func([q], [kv], [kv], torch.tensor([0, 5, 16]).int(), 11)
    with pytest.raises(ValueError, match="max_seqlen: 8"):
        emulated.ring_flash_attn_varlen_func([q], [kv], [kv], cu, 8)
    with pytest.raises(ValueError, match="cu_seqlens: expected offsets"):
        emulated.ring_flash_attn_varlen_func([q], [kv], [kv], [0, 6, 12], 10)
    with pytest.raises(TypeError, match="cu_seqlens: expected int32"):
        emulated.ring_flash_attn_varlen_func([q], [kv], [kv], cu.long(), 10)
    with pytest.raises(ValueError, match="q: expected \\(total_tokens"):
        emulated.ring_flash_attn_varlen_func([q[None]], [kv], [kv], cu, 10)
    with pytest.raises(ValueError, match="same local tokens"):
        emulated.ring_flash_attn_varlen_func([q], [kv[:8]], [kv[:8]], cu, 10)
    # Odd local lengths are fine in the contiguous layout.
    emulated.ring_flash_attn_varlen_func([q], [kv], [kv], torch.tensor([0, 5, 16]).int(), 11,
                                         layout="contiguous")


# --- decode over a split KV cache ---------------------------------------------------------------

def _split_cache(k, v, lengths, world, interleaved):
    """Rank r's part of each sequence's first lengths[b] cache tokens: contiguous ranges (rank r
    the r-th of `world` uneven runs, some empty) or tokens interleaved (t on rank t % world),
    each part packed from the start of its own (batch, capacity, heads, d) cache."""
    parts = []
    for r in range(world):
        rows, counts = [], []
        for b, n in enumerate(lengths):
            if interleaved:
                take = torch.arange(n)[r::world]
            else:  # cuts at uneven points: 0, n/7, ..., so that ranks hold different amounts
                cuts = [n * (i * i) // (world * world) for i in range(world + 1)]
                take = torch.arange(cuts[r], cuts[r + 1])
            rows.append(take)
            counts.append(len(take))
        capacity = max(1, max(counts))
        kp = torch.zeros((len(lengths), capacity) + k.shape[2:], dtype=k.dtype, device=k.device)
        vp = torch.zeros_like(kp)
        for b, take in enumerate(rows):
            kp[b, :len(take)] = k[b, take]
            vp[b, :len(take)] = v[b, take]
        parts.append((kp, vp, torch.tensor(counts, dtype=torch.int32, device=k.device)))
    return parts


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interleaved", [False, True], ids=["ranges", "interleaved"])
@pytest.mark.parametrize("seqlen_q", [1, 3])
@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_split_kvcache_matches_one_call(device, world, seqlen_q, interleaved):
    dtype, chunk, headdim = CONFIG[device]
    gen = torch.Generator().manual_seed(5)
    lengths = [40 * chunk // 16, 3, 0, 17 * chunk // 16]
    capacity = max(lengths)

    def rand(*shape):
        return torch.randn(shape, generator=gen).to(device, dtype)

    q = rand(len(lengths), seqlen_q, 8, headdim)
    k, v = rand(len(lengths), capacity, 2, headdim), rand(len(lengths), capacity, 2, headdim)
    whole = torch.tensor(lengths, dtype=torch.int32, device=device)
    single, single_lse = hfa.flash_attn_with_kvcache(q, k, v, cache_seqlens=whole,
                                                     return_softmax_lse=True)
    # float64 over every sequence's cache, no mask (a part's queries see all its keys).
    oracle = torch.zeros(q.shape, dtype=torch.float64, device=device)
    for b, n in enumerate(lengths):
        if n:
            oracle[b] = float64_attention(q[b:b + 1], k[b:b + 1, :n], v[b:b + 1, :n],
                                          torch.zeros_like(q[b:b + 1]), False)["out"][0]
    parts = _split_cache(k, v, lengths, world, interleaved)
    results = emulated.split_kvcache_attention(
        q, [p[0] for p in parts], [p[1] for p in parts],
        per_rank=[{"cache_seqlens": p[2]} for p in parts], return_softmax_lse=True)
    scale = oracle.abs().max().item()
    single_err = (single.double() - oracle).abs().max().item()
    for out, lse in results:
        assert out.dtype == q.dtype and out.shape == q.shape
        assert torch.equal(out, results[0][0])  # every rank gets the same result
        # The partials are rounded to q's dtype once before the merge: one more rounding.
        assert (out.double() - oracle).abs().max().item() <= 2 * single_err + FLOOR[dtype] * scale
        assert torch.equal(torch.isneginf(lse), torch.isneginf(single_lse))  # the empty one
        finite = ~torch.isneginf(single_lse)
        assert (lse - single_lse)[finite].abs().max().item() < 1e-3
    assert (results[0][0][2] == 0).all()  # a sequence with no cached token: out 0


def test_split_kvcache_varlen_queries_and_errors():
    gen = torch.Generator().manual_seed(6)
    k, v = (torch.randn((2, 30, 2, 64), generator=gen) for _ in range(2))
    q = torch.randn((5, 4, 64), generator=gen)  # 2 and 3 query rows
    cu_q = torch.tensor([0, 2, 5], dtype=torch.int32)
    lengths = [30, 11]
    single, single_lse = hfa.flash_attn_with_kvcache(
        q, k, v, cache_seqlens=torch.tensor(lengths, dtype=torch.int32), cu_seqlens_q=cu_q,
        max_seqlen_q=3, return_softmax_lse=True)
    parts = _split_cache(k, v, lengths, 3, False)
    results = emulated.split_kvcache_attention(
        q, [p[0] for p in parts], [p[1] for p in parts],
        per_rank=[{"cache_seqlens": p[2]} for p in parts], cu_seqlens_q=cu_q, max_seqlen_q=3,
        return_softmax_lse=True)
    out, lse = results[1]
    assert (out - single).abs().max().item() < 1e-5
    assert (lse - single_lse).abs().max().item() < 1e-5
    with pytest.raises(ValueError, match="k_caches, v_caches, per_rank"):
        emulated.split_kvcache_attention(q, [k, k], [v])
