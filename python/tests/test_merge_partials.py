"""hfa.merge_partials on numpy arrays (the CPU backend): the merge of N partials against float64,
rows a partial does not see (LSE -inf, its output NaN: never read), rows no partial sees (0 and
-inf), in place, strided views, and errors naming the argument. The torch side (CPU and CUDA) is
test_torch_merge.py."""

import numpy as np
import pytest

import hfa

INF = np.inf


def partials(n, shape=(2, 7, 3, 40), varlen=False, dtypes=(np.float32, np.float16), seed=0):
    """n (out, lse) pairs: out of `shape` ((total, heads, d) when varlen), lse (b, h, s) or
    (h, total); a quarter of each partial's rows unseen (lse -inf, out NaN), row 0 unseen by
    all, row 1 with large LSEs far apart."""
    rng = np.random.default_rng(seed)
    rows = shape[:-1]
    outs, lses = [], []
    for k in range(n):
        out = rng.standard_normal(shape).astype(dtypes[k % len(dtypes)])
        lse = (rng.standard_normal(rows) * 3 + k).astype(np.float32)  # in out's row order
        lse[rng.uniform(size=rows) < 0.25] = -INF
        lse.reshape(-1)[0] = -INF
        lse.reshape(-1)[1] = 1000.0 - 5 * k
        out[np.isneginf(lse)] = np.nan
        outs.append(out)
        # out's row order is (b, s, h) or (t, h); the LSE layout is (b, h, s) or (h, t).
        lses.append(np.ascontiguousarray(lse.T if varlen else lse.transpose(0, 2, 1)))
    return outs, lses


def to_rows(lse, varlen):
    """An LSE back in out's row order."""
    return lse.T if varlen else lse.transpose(0, 2, 1)


def reference(outs, lses, varlen=False):
    """float64 (out, lse) in the library's layouts."""
    ls = np.stack([to_rows(l, varlen) for l in lses]).astype(np.float64)
    seen = ~np.isneginf(ls)
    top = np.max(np.where(seen, ls, -INF), axis=0)
    safe = np.where(np.isneginf(top), 0.0, top)
    w = np.where(seen, np.exp(ls - safe), 0.0)
    total = w.sum(axis=0)
    lse = np.where(total > 0, safe + np.log(np.where(total > 0, total, 1.0)), -INF)
    w = w / np.where(total > 0, total, 1.0)
    out = sum(np.where(seen[k][..., None], w[k][..., None] * np.nan_to_num(o.astype(np.float64)),
                       0.0) for k, o in enumerate(outs))
    return out, to_rows(lse, varlen)


def check(out, lse, want_out, want_lse, dtype=np.float32):
    assert not np.isnan(out).any() and not np.isnan(lse).any()
    tol = {np.float32: 1e-5, np.float16: 2e-3}[np.dtype(dtype).type]
    np.testing.assert_allclose(out.astype(np.float64), want_out, rtol=tol, atol=tol)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    finite = ~np.isneginf(want_lse)
    np.testing.assert_allclose(lse[finite], want_lse[finite], rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("varlen", [False, True], ids=["fixed", "varlen"])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 16])
def test_merge_matches_float64(n, varlen):
    shape = (29, 3, 40) if varlen else (2, 7, 3, 40)
    outs, lses = partials(n, shape, varlen, seed=n)
    out, lse = hfa.merge_partials(outs, lses)
    assert out.dtype == np.float32 and out.shape == shape
    assert lse.dtype == np.float32 and lse.shape == lses[0].shape
    check(out, lse, *reference(outs, lses, varlen))


def test_rows_no_partial_sees_are_zero_and_minus_inf():
    outs, lses = partials(3)
    out, lse = hfa.merge_partials(outs, lses)
    assert np.all(out[0, 0, 0] == 0) and lse[0, 0, 0] == -INF


def test_into_given_buffers_of_float16():
    outs, lses = partials(4, seed=3)
    out = np.full(outs[0].shape, 7, np.float16)
    lse = np.full(lses[0].shape, 7, np.float32)
    got_out, got_lse = hfa.merge_partials(outs, lses, out=out, lse=lse)
    assert got_out is out and got_lse is lse
    check(out, lse, *reference(outs, lses), dtype=np.float16)


def test_in_place_into_the_first_partial():
    outs, lses = partials(3, dtypes=(np.float32,), seed=4)
    want = reference(outs, lses)
    acc, acc_lse = outs[0], lses[0]
    out, lse = hfa.merge_partials(outs, lses, out=acc, lse=acc_lse)
    assert out is acc and lse is acc_lse
    check(acc, acc_lse, *want)


def test_strided_views_are_read_in_place():
    outs, lses = partials(2, seed=5)
    wide = np.full((2, 7, 3, 64), np.nan, np.float32)
    wide[..., :40] = outs[1]
    transposed = np.ascontiguousarray(lses[1].transpose(0, 2, 1)).transpose(0, 2, 1)  # (b, h, s)
    out_store = np.full((2, 7, 3, 48), 5, np.float32)
    lse_store = np.full((2, 7, 3), 5, np.float32)
    out, lse = hfa.merge_partials([outs[0], wide[..., :40]], [lses[0], transposed],
                                  out=out_store[..., :40], lse=lse_store.transpose(0, 2, 1))
    check(out, lse, *reference(outs, lses))
    assert np.all(out_store[..., 40:] == 5)  # written through the view, nowhere else


def test_errors_name_the_argument():
    outs, lses = partials(2)
    with pytest.raises(ValueError, match=r"^outs\[1\]: expected shape \(2, 7, 3, 40\) \(as out\)"):
        hfa.merge_partials([outs[0], outs[1][:, :6]], lses)
    with pytest.raises(ValueError, match=r"^outs: expected 1 to 16 partial outputs"):
        hfa.merge_partials(outs * 9, lses * 9)
    with pytest.raises(ValueError, match=r"^lses: expected 2 LSEs \(one per partial output\)"):
        hfa.merge_partials(outs, lses[:1])
    with pytest.raises(ValueError, match=r"^outs: expected at least one partial"):
        hfa.merge_partials([], [])
    with pytest.raises(ValueError, match=r"^lses\[0\]: expected shape \(2, 3, 7\)"):
        hfa.merge_partials(outs, [lses[0].transpose(0, 2, 1).copy(), lses[1]])
    with pytest.raises(TypeError, match=r"outs\[0\]"):
        hfa.merge_partials([outs[0].astype(np.float64), outs[1]], lses)
    with pytest.raises(hfa.HfaInvalidArgument, match=r"^lses\[1\]: expected dtype f32, got f16"):
        hfa.merge_partials(outs, [lses[0], lses[1].astype(np.float16)])
    flat = np.zeros(outs[0].size + 1, np.float32)
    first, shifted = flat[:-1].reshape(outs[0].shape), flat[1:].reshape(outs[0].shape)
    with pytest.raises(ValueError, match=r"^out: overlaps outs\[0\] \(an output may be an input "
                                         r"only as the very same view"):
        hfa.merge_partials([first, outs[1]], lses, out=shifted)
    # An output is never copied: a layout the library cannot take is an error, not a silent copy.
    strided = np.zeros((2, 7, 3, 80), np.float32)[..., ::2]
    with pytest.raises(ValueError, match=r"^out: the last dim must have unit stride"):
        hfa.merge_partials(outs, lses, out=strided)
