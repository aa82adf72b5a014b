"""hfa inside other frameworks; each submodule imports its framework, none is imported here.

- hfa.integrations.torch: PyTorch SDPA's flash backend runs hfa (activate()).
- hfa.integrations.transformers: "hfa" as a Hugging Face transformers attention (register()).
"""
