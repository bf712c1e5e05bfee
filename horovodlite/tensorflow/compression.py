"""Gradient compression for tf tensors: the shared casting compressors
(horovodlite/compression.py) with tf casts, so compressed collectives stay
differentiable and work inside tf.function."""
import tensorflow as tf

from ..compression import Compressor, NoneCompressor, make_compression  # noqa: F401

Compression = make_compression(
    is_float=lambda d: d.is_floating,
    dtype_of=lambda t: t.dtype,
    cast=lambda t, d: tf.cast(t, d),
    float16=tf.float16, bfloat16=tf.bfloat16)
FP16Compressor = Compression.fp16  # Horovod's names
BF16Compressor = Compression.bf16
