"""Compression.none / fp16 / bf16 for torch tensors (casts are differentiable)."""
import torch

# Compressor / NoneCompressor are re-exported under Horovod's names.
from ..compression import Compressor, NoneCompressor, make_compression  # noqa: F401

Compression = make_compression(
    is_float=lambda d: d.is_floating_point,
    dtype_of=lambda t: t.dtype,
    cast=lambda t, d: t.to(d),
    float16=torch.float16, bfloat16=torch.bfloat16)

FP16Compressor = Compression.fp16  # Horovod's names
BF16Compressor = Compression.bf16
