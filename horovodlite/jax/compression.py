"""Gradient compression for jax arrays: the shared casting compressors
(horovodlite/compression.py) with jax's dtypes and casts, so it works the same
eagerly and under jit."""
import jax.numpy as jnp

from ..compression import Compressor, NoneCompressor, make_compression  # noqa: F401

Compression = make_compression(
    is_float=lambda d: jnp.issubdtype(d, jnp.floating),
    dtype_of=lambda t: t.dtype,
    cast=lambda t, d: t.astype(d),
    float16=jnp.dtype(jnp.float16), bfloat16=jnp.dtype(jnp.bfloat16))
FP16Compressor = Compression.fp16  # Horovod's names
BF16Compressor = Compression.bf16
