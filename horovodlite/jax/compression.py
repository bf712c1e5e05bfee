"""Gradient compression for jax arrays: cast floating arrays to 16 bits for the wire
and back afterwards. Works the same eagerly and under jit."""
import jax.numpy as jnp


class Compressor:
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    pass


class _CastCompressor(Compressor):
    wire = None

    @classmethod
    def compress(cls, tensor):
        dtype = tensor.dtype
        if jnp.issubdtype(dtype, jnp.floating) and dtype != cls.wire:
            return tensor.astype(cls.wire), dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.astype(ctx)


class FP16Compressor(_CastCompressor):
    wire = jnp.float16


class BF16Compressor(_CastCompressor):
    wire = jnp.bfloat16


class Compression:
    """`none`, `fp16` (as in Horovod) and `bf16` (ours: keeps float32's exponent range)."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
