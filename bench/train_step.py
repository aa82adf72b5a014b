#!/usr/bin/env python3
"""One training step of a small Llama (Hugging Face transformers) with hfa as its attention,
against the same step with PyTorch SDPA: the loss and every parameter's gradient.

The model is a LlamaForCausalLM built from a LlamaConfig (random init, seeded; default hidden
1024, 4 layers, 16 query heads over 4 kv heads with head_dim 128, vocab 32000) in bf16 on CUDA.
hfa is registered as a transformers attention function (AttentionInterface) that calls
hfa.flash_attn_func(..., causal=True) on the (batch, seq, heads, dim) views of the model's
tensors, GQA included (k/v are not repeated). One batch of random tokens (batch 2, seqlen 1024)
goes through forward + backward twice on the same weights, once per implementation.

Printed: each parameter's relative gradient difference ‖g_hfa − g_sdpa‖ / ‖g_sdpa‖ and the max.
Exit status 1 when that max exceeds --threshold (5e-2) or anything is not finite.

With --float64 (the default; --no-float64 skips it), a smaller model (2 layers, seqlen 256)
also runs in bf16 with both implementations and, on the same bf16-rounded weights, in float64
with transformers' "eager" attention, to say which of sdpa and hfa is farther from float64
(informational; no exit status). That reference is float64 except where transformers computes
in float32 on purpose (RMSNorm, RoPE's angles, eager's softmax): relative errors ~1e-7, far
below bf16's ~4e-3.

Writes <out>/<date>-train-step.json (the results' common shape: what, commit, date, device,
versions, rows; one row per parameter) with the losses, the max and the worst parameters.

    python3 bench/train_step.py --out DIR [--seqlen 1024 --layers 4 --no-float64]
"""

import argparse
import copy
import datetime
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import git_commit  # noqa: E402  (benchlib also puts python/ on the path)

CALLS = {"hfa": 0, "hfa_with_mask": 0}  # counted by hfa_attention: proof that it ran


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory for <date>-train-step.json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--threshold", type=float, default=5e-2,
                   help="largest relative gradient difference hfa vs sdpa that passes")
    p.add_argument("--float64", action=argparse.BooleanOptionalAction, default=True,
                   help="also compare both against a float64 run of a smaller model")
    p.add_argument("--f64-layers", type=int, default=2)
    p.add_argument("--f64-seqlen", type=int, default=256)
    p.add_argument("--worst", type=int, default=5, help="worst parameters kept in the JSON")
    return p.parse_args(argv)


# --- hfa as a transformers attention function --------------------------------------------------

def hfa_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                  **kwargs):
    """transformers' attention-function contract: query (batch, heads_q, seq, dim), key/value
    (batch, heads_kv, seq, dim), not repeated for GQA; returns (out (batch, seq, heads_q, dim),
    None). Causal only: transformers builds no mask for an implementation it has no mask
    function for, so a padding mask could not reach here anyway (none is used in this script)."""
    import hfa
    if dropout:
        raise ValueError(f"hfa_attention: dropout {dropout} is not supported")
    if getattr(module, "is_causal", True) is False:
        raise ValueError("hfa_attention: this script's attention is causal only")
    CALLS["hfa"] += 1
    CALLS["hfa_with_mask"] += attention_mask is not None
    out = hfa.flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                              softmax_scale=scaling, causal=True)
    return out, None


def register_hfa():
    from transformers import AttentionInterface
    AttentionInterface.register("hfa", hfa_attention)


def set_attention(model, name):
    """Switch the model's attention implementation in place (same weights). transformers 5 has
    model.set_attn_implementation; older ones read config._attn_implementation at each call."""
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    if model.config._attn_implementation != name:
        try:
            model.config._attn_implementation = name
        except AttributeError:  # a read-only property over the internal attribute
            model.config._attn_implementation_internal = name
    if model.config._attn_implementation != name:
        raise RuntimeError(f"could not set attn_implementation={name!r} "
                           f"(the model reports {model.config._attn_implementation!r})")


# --- the model and one step --------------------------------------------------------------------

def build_model(args, layers, dtype):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                         intermediate_size=args.intermediate, num_hidden_layers=layers,
                         num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                         head_dim=args.head_dim, max_position_embeddings=max(args.seqlen, 4096),
                         attention_dropout=0.0, tie_word_embeddings=False, use_cache=False)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config)  # random init, in float32 on the CPU
    head_dim = getattr(model.model.layers[0].self_attn, "head_dim", None)
    if head_dim != args.head_dim:
        raise RuntimeError(f"the model's head_dim is {head_dim}, not {args.head_dim}")
    return model.to(device="cuda", dtype=dtype).train()


def step(model, ids, name):
    """(loss, {param name: gradient}) of one forward + backward with attention `name`."""
    set_attention(model, name)
    model.zero_grad(set_to_none=True)
    before = CALLS["hfa"]
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    ran_hfa = CALLS["hfa"] > before
    if ran_hfa != (name == "hfa"):
        raise RuntimeError(f"attn_implementation={name!r}, but hfa_attention "
                           f"{'ran' if ran_hfa else 'did not run'}")
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()
             if p.grad is not None}
    return loss.item(), grads


def rel_diff(a, b):
    """‖a − b‖ / ‖b‖, in float64 (‖a − b‖ when b is 0)."""
    a, b = a.double(), b.double()
    nb = b.norm().item()
    d = (a - b).norm().item()
    return d / nb if nb > 0 else d


def tokens(args, batch, seqlen):
    import torch
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    return torch.randint(args.vocab, (batch, seqlen), generator=gen).to("cuda")


def compare_with_sdpa(args):
    import torch
    model = build_model(args, args.layers, torch.bfloat16)
    ids = tokens(args, args.batch, args.seqlen)
    loss_sdpa, g_sdpa = step(model, ids, "sdpa")
    loss_hfa, g_hfa = step(model, ids, "hfa")
    if set(g_sdpa) != set(g_hfa):
        raise RuntimeError("the two runs gave gradients for different parameters")
    rows = []
    for n in g_sdpa:
        rows.append({"case": {"param": n, "shape": list(g_sdpa[n].shape)},
                     "metric": "rel_grad_diff_vs_sdpa", "hfa": rel_diff(g_hfa[n], g_sdpa[n])})
    return {"loss": {"sdpa": loss_sdpa, "hfa": loss_hfa}, "rows": rows}


def compare_with_float64(args):
    """A smaller model: bf16 with sdpa and with hfa, float64 (eager) on the same rounded weights."""
    import torch
    model = build_model(args, args.f64_layers, torch.bfloat16)
    ids = tokens(args, args.batch, args.f64_seqlen)
    loss_sdpa, g_sdpa = step(model, ids, "sdpa")
    loss_hfa, g_hfa = step(model, ids, "hfa")
    ref = copy.deepcopy(model).to(torch.float64)
    del model
    loss_64, g_64 = step(ref, ids, "eager")
    del ref
    rows, farther = [], 0
    for n in g_64:
        e_hfa, e_sdpa = rel_diff(g_hfa[n], g_64[n]), rel_diff(g_sdpa[n], g_64[n])
        farther += e_hfa > e_sdpa
        rows.append({"param": n, "hfa": e_hfa, "sdpa": e_sdpa})
    return {
        "layers": args.f64_layers, "seqlen": args.f64_seqlen,
        "loss": {"float64": loss_64, "sdpa": loss_sdpa, "hfa": loss_hfa},
        "max_rel_grad_diff_vs_float64": {"hfa": max(r["hfa"] for r in rows),
                                         "sdpa": max(r["sdpa"] for r in rows)},
        "params_where_hfa_is_farther": f"{farther} of {len(rows)}",
        "rows": rows,
    }


def no_nan(x):
    """x with NaN and inf floats as None (strict JSON)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: no_nan(v) for k, v in x.items()}
    if isinstance(x, list):
        return [no_nan(v) for v in x]
    return x


def versions():
    import torch
    import transformers

    import hfa
    return {"torch": torch.__version__, "cuda": torch.version.cuda,
            "transformers": transformers.__version__, "hfa": hfa.version(),
            "python": sys.version.split()[0]}


def main(argv=None):
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("train_step: no CUDA device", file=sys.stderr)
        return 2
    register_hfa()

    main_run = compare_with_sdpa(args)
    rows = main_run["rows"]
    width = max(len(r["case"]["param"]) for r in rows)
    print(f"{'parameter':<{width}}  ‖g_hfa − g_sdpa‖/‖g_sdpa‖")
    for r in rows:
        print(f"{r['case']['param']:<{width}}  {r['hfa']:.3e}")
    finite = all(math.isfinite(r["hfa"]) for r in rows)
    # Worst first; a NaN or inf counts as the worst of all.
    worst = sorted(rows, key=lambda r: (math.isfinite(r["hfa"]),
                                        -r["hfa"] if math.isfinite(r["hfa"]) else 0.0))
    max_diff = worst[0]["hfa"]
    loss = main_run["loss"]
    print(f"loss: sdpa {loss['sdpa']:.6f}, hfa {loss['hfa']:.6f}")
    print(f"max relative gradient difference: {max_diff:.3e} ({worst[0]['case']['param']}); "
          f"threshold {args.threshold:g}")
    finite = finite and all(math.isfinite(x) for x in loss.values())

    f64 = None
    if args.float64:
        f64 = compare_with_float64(args)
        m = f64["max_rel_grad_diff_vs_float64"]
        print(f"float64 reference ({f64['layers']} layers, seqlen {f64['seqlen']}): max relative "
              f"gradient difference hfa {m['hfa']:.3e}, sdpa {m['sdpa']:.3e}; hfa is farther on "
              f"{f64['params_where_hfa_is_farther']} parameters")

    passed = finite and max_diff <= args.threshold
    config = {k: getattr(args, k) for k in ("batch", "seqlen", "layers", "hidden", "heads",
                                            "kv_heads", "head_dim", "intermediate", "vocab",
                                            "seed")}
    config["dtype"] = "bf16"
    result = {
        "what": "train-step", "commit": git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(), "versions": versions(), "config": config,
        "loss": loss, "max_rel_grad_diff": max_diff, "threshold": args.threshold,
        "passed": passed,
        "worst": [{"param": r["case"]["param"], "rel_grad_diff": r["hfa"]}
                  for r in worst[:args.worst]],
        "hfa_calls_with_a_mask": CALLS["hfa_with_mask"],
        "float64": f64, "rows": rows,
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{datetime.date.today().isoformat()}-train-step.json")
    with open(path, "w") as f:
        json.dump(no_nan(result), f, indent=1)
        f.write("\n")
    print(f"wrote {path}; {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
