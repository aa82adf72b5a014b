"""Textbook attention in float64 with torch autograd, for the tests that compare torch results
with it (test_distributed.py, and nccl_cp_check.py under torchrun)."""

import math

import torch

GRADS = ("dq", "dk", "dv")


def float64_attention(q, k, v, dout, causal):
    """out, lse, dq, dk, dv of softmax(q·kᵀ/√d)·v in float64; (batch, seqlen, heads, headdim)
    inputs, GQA by repeating k / v, causal top-left = bottom-right (equal lengths)."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    group = q.shape[2] // k.shape[2]
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k.repeat_interleave(group, 2))
    scores = scores / math.sqrt(q.shape[-1])
    if causal:
        seen = torch.ones(q.shape[1], k.shape[1], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~seen, float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v.repeat_interleave(group, 2))
    grads = torch.autograd.grad(out, (q, k, v), dout.double())
    return dict(out=out.detach(), lse=torch.logsumexp(scores, -1).detach(),
                **dict(zip(GRADS, grads)))
