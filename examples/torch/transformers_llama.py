#!/usr/bin/env python3
"""hfa as the attention of a Hugging Face transformers model: registered as an attention
function (transformers.AttentionInterface) and selected by name. A small random Llama (GQA 4:1,
head_dim 128) runs one forward + backward with hfa and with PyTorch SDPA on the same weights;
the losses, logits and a gradient are compared. Exits 1 when they differ by more than bf16 noise.

Needs torch >= 2.4, transformers with AttentionInterface (>= 4.48) and a Hopper GPU.
"""

import sys

import torch
from transformers import AttentionInterface, AutoModelForCausalLM, LlamaConfig

import hfa

CALLS = [0]  # hfa_attention's calls: proof that the model ran hfa


def hfa_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                  **kwargs):
    """transformers' contract: query (batch, heads_q, seq, dim), key/value (batch, heads_kv, seq,
    dim), not repeated for GQA; returns (out (batch, seq, heads_q, dim), None). Causal, without
    padding (hfa takes no mask: use varlen calls for padded batches)."""
    if dropout:
        raise ValueError(f"hfa_attention: dropout {dropout} is not supported")
    CALLS[0] += 1
    out = hfa.flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                              softmax_scale=scaling, causal=True)
    return out, None


def main():
    AttentionInterface.register("hfa", hfa_attention)
    config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                         num_hidden_layers=2, num_attention_heads=16, num_key_value_heads=4,
                         head_dim=128, attention_dropout=0.0, use_cache=False)
    torch.manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (2, 512), device="cuda")
    results, weights = {}, None
    for name in ("sdpa", "hfa"):
        model = AutoModelForCausalLM.from_config(config, attn_implementation=name)
        if weights is None:
            weights = model.state_dict()
        model.load_state_dict(weights)  # the same random weights for both
        model = model.to(device="cuda", dtype=torch.bfloat16)
        output = model(input_ids=ids, labels=ids)
        output.loss.backward()
        if (CALLS[0] > 0) != (name == "hfa"):
            raise RuntimeError(f"attn_implementation={name!r}, but hfa ran {CALLS[0]} times")
        grad = model.model.layers[0].self_attn.q_proj.weight.grad
        results[name] = (output.loss.item(), output.logits.float(), grad.float())

    (loss_s, logits_s, grad_s), (loss_h, logits_h, grad_h) = results["sdpa"], results["hfa"]
    logits_diff = ((logits_h - logits_s).norm() / logits_s.norm()).item()
    grad_diff = ((grad_h - grad_s).norm() / grad_s.norm()).item()
    print(f"loss: sdpa {loss_s:.5f}, hfa {loss_h:.5f}")
    print(f"relative difference: logits {logits_diff:.1e}, layer 0 q_proj gradient {grad_diff:.1e}")
    return 0 if abs(loss_h - loss_s) < 1e-2 and logits_diff < 2e-2 and grad_diff < 5e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
