#!/usr/bin/env python3
"""A whole transformers model with hfa as its attention against the same model on SDPA.

A random-init Llama (the shape of Llama-3-8B's layers: hidden 4096, 32 query / 8 KV heads,
head dim 128, MLP 14336; --layers of them), bf16, one sequence of --seqlen tokens: the forward
(no_grad) and a training step (forward + backward of the LM loss), timed with CUDA events (median
of --reps after --warmup), in tokens per second. Implementations: "hfa"
(attn_implementation="hfa", hfa.integrations.transformers) and "sdpa" (transformers' SDPA
attention, PyTorch choosing its backend, cuDNN on this GPU), plus "sdpa_flash" forced to SDPA's
flash (FlashAttention-2) backend. The logits of hfa and SDPA are compared (relative norm error)
so that a fast wrong model cannot pass.

One model, its attention implementation switched between timings (set_attn_implementation):
--rounds rounds, each timing every implementation in turn, so that a drift of the GPU's speed
during the run (seen: several percent between the start and the end of a run) falls on all of
them alike. A row's value is the median over the rounds; "rounds" keeps each round's, and
"hfa_over_sdpa" each round's ratio, whose spread says whether a lead is more than noise.

JSON (docs/design.md §5): {"what": "model", ..., "rows": [{"case": {"model", "layers", "seqlen",
"mode"}, "metric": "tokens_per_s", "hfa": x, "sdpa": y, "sdpa_flash": z, "rounds": {impl:
[...]}, "hfa_over_sdpa": [...]}]}.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402


def build(transformers, torch, layers):
    config = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=32768)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to("cuda", torch.bfloat16)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(benchlib.REPO, "bench", "results"))
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seqlen", type=int, default=8192)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of timing every implementation in turn (median over them)")
    p.add_argument("--impls", nargs="+", default=["hfa", "sdpa", "sdpa_flash"],
                   choices=["hfa", "sdpa", "sdpa_flash"])
    p.add_argument("--profile", action="store_true",
                   help="also profile 2 steps of each mode: kernel µs a step by name, in the "
                        "JSON's \"profile\" and printed (the 15 longest)")
    a = p.parse_args()

    import torch
    import transformers
    from torch.nn.attention import SDPBackend

    import hfa.integrations.transformers as hfa_hf
    hfa_hf.register()
    now, t0 = benchlib.utc_now(), time.time()
    a.dtype, a.tokens, a.head_budget, a.rep = "bf16", a.seqlen, 4096, a.reps
    result = benchlib.new_result("model", now, a, accuracy="logits vs SDPA, relative norm",
                                 layers=a.layers, transformers=transformers.__version__)
    result["settings"]["do_bench"] = (f"CUDA events, median of {a.reps} after {a.warmup} "
                                      f"warm-up, per round; median of {a.rounds} rounds, the "
                                      f"implementations in turn within each")
    benchlib.announce(result)
    ids = torch.randint(0, 32000, (1, a.seqlen), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(1))
    impls = {"hfa": ("hfa", None), "sdpa": ("sdpa", None),
             "sdpa_flash": ("sdpa", SDPBackend.FLASH_ATTENTION)}
    impls = {name: impls[name] for name in a.impls}
    rows = {mode: {"case": {"model": "llama-8b-shape", "layers": a.layers, "seqlen": a.seqlen,
                            "mode": mode}, "metric": "tokens_per_s"}
            for mode in ("forward", "train_step")}
    logits = {}
    model = build(transformers, torch, a.layers)
    backend = None

    def forward():
        with torch.no_grad(), benchlib.under(backend):
            return model(ids).logits

    def train_step():
        with benchlib.under(backend):
            model(ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)

    failed = set()
    for round_ in range(a.rounds):
        for name, (impl, backend) in impls.items():
            if name in failed:
                continue
            model.set_attn_implementation(impl)
            try:
                if round_ == 0:
                    logits[name] = forward().float()
                for mode, fn in (("forward", forward), ("train_step", train_step)):
                    tok_s = a.seqlen / benchlib.event_seconds(fn, a.warmup, a.reps)
                    rows[mode].setdefault("rounds", {}).setdefault(name, []).append(tok_s)
                    if a.profile and round_ == 0:
                        kernels = benchlib.kernel_profile(fn, steps=2, warmup=1)
                        result.setdefault("profile", {}).setdefault(mode, {})[name] = kernels
                        benchlib.print_kernel_profile(f"profile {name} {mode}", kernels, top=15)
            except Exception as e:  # noqa: BLE001  (a row says what failed; the run goes on)
                failed.add(name)
                result["skipped"].append({"case": {"model": "llama-8b-shape"}, "impl": name,
                                          "reason": benchlib.skip_reason(e)})
                continue
            print(f"bench: round {round_} {name}: forward "
                  f"{benchlib.fmt(rows['forward']['rounds'][name][-1])} tok/s, train step "
                  f"{benchlib.fmt(rows['train_step']['rounds'][name][-1])} tok/s", flush=True)
    for row in rows.values():
        runs = row.setdefault("rounds", {})
        for name in impls:
            xs = sorted(runs.get(name, []))
            row[name] = xs[len(xs) // 2] if xs and name not in failed else None
        if "hfa" in runs and "sdpa" in runs and not failed & {"hfa", "sdpa"}:
            row["hfa_over_sdpa"] = [round(h / s, 4) for h, s in zip(runs["hfa"], runs["sdpa"])]
            print(f"bench: {row['case']['mode']}: hfa / sdpa by round {row['hfa_over_sdpa']}")
    if "hfa" in logits and "sdpa" in logits:
        err = ((logits["hfa"] - logits["sdpa"]).norm() / logits["sdpa"].norm()).item()
        result["accuracy"].append({"case": rows["forward"]["case"], "logits_rel_err": err,
                                   "verdict": "pass" if err < 4e-2 else "fail"})
        print(f"bench: logits hfa vs sdpa, relative norm error {err:.3g}")
    result["rows"] = list(rows.values())
    head = ["mode", "hfa tok/s", "SDPA (cuDNN) tok/s", "SDPA flash tok/s", "hfa ÷ SDPA",
            "hfa ÷ SDPA by round"]
    body = [[r["case"]["mode"]] + [benchlib.fmt(r.get(k)) for k in ("hfa", "sdpa", "sdpa_flash")]
            + [benchlib.ratio(r.get("hfa"), r.get("sdpa")),
               " ".join(f"{x:.3f}" for x in r.get("hfa_over_sdpa", []))]
            for r in result["rows"]]
    md = benchlib.markdown(f"Llama ({a.layers} layers of Llama-3-8B's shape) at {a.seqlen} "
                           f"tokens", result, head, body)
    stem = os.path.join(a.out, f"{now:%Y-%m-%d}-model")
    written = benchlib.write_results(stem, result, md)
    return benchlib.conclude(result, written, t0, 0, False)


if __name__ == "__main__":
    sys.exit(main())
