"""Gradient compression for tf tensors: floating-point tensors travel as float16 or
bfloat16 and are cast back after the collective. The casts are tf ops, so compressed
collectives stay differentiable and work inside tf.function."""
import tensorflow as tf


class Compressor:
    """Interface: compress(tensor) -> (tensor, ctx) before the collective,
    decompress(tensor, ctx) -> tensor after it."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    """Sends tensors as they are."""


class _CastCompressor(Compressor):
    def __init__(self, wire, label):
        self.wire, self._label = wire, label

    def compress(self, tensor):
        if tensor.dtype.is_floating and tensor.dtype != self.wire:
            return tf.cast(tensor, self.wire), tensor.dtype
        return tensor, None

    def decompress(self, tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)

    def __repr__(self):
        return f"Compression.{self._label}"


class Compression:
    """Optional compression used by allreduce, DistributedGradientTape and
    DistributedOptimizer: `none`, `fp16`, and `bf16` (which keeps float32's range)."""
    none = NoneCompressor()
    fp16 = _CastCompressor(tf.float16, "fp16")
    bf16 = _CastCompressor(tf.bfloat16, "bf16")
