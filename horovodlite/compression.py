"""Gradient compression for the wire: floating-point tensors are cast to a 16-bit type
before the collective and back after. The logic is the same for every framework; each
frontend supplies how to read a dtype and how to cast (see `make_compression`).

A compressor is anything with compress(tensor) -> (tensor, ctx) and
decompress(tensor, ctx) -> tensor, so Horovod-style classes with static methods work
wherever these objects do."""
import types


class Compressor:
    """Interface: compress before the collective, decompress the result."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    """Sends tensors as they are."""


class CastCompressor(Compressor):
    """Casts floating-point tensors to `wire` for the collective; other dtypes pass.
    `wire` may be a function giving the type, called on first use (numpy's bfloat16
    comes from ml_dtypes, whose import takes 0.5 s)."""

    def __init__(self, wire, is_float, dtype_of, cast, label):
        self._wire, self._is_float, self._dtype_of, self._cast = wire, is_float, dtype_of, cast
        self._label = label

    @property
    def wire(self):
        if isinstance(self._wire, types.FunctionType):  # dtypes may be callable (jax's)
            self._wire = self._wire()
        return self._wire

    def compress(self, tensor):
        dtype = self._dtype_of(tensor)
        if self._is_float(dtype) and dtype != self.wire:
            return self._cast(tensor, self.wire), dtype
        return tensor, None

    def decompress(self, tensor, ctx):
        return tensor if ctx is None else self._cast(tensor, ctx)

    def __repr__(self):
        return f"Compression.{self._label}"


def make_compression(is_float, dtype_of, cast, float16, bfloat16):
    """A `Compression` namespace (none, fp16, bf16) for one framework."""

    class Compression:
        """Optional gradient compression used by allreduce and DistributedOptimizer."""
        none = NoneCompressor()
        fp16 = CastCompressor(float16, is_float, dtype_of, cast, "fp16")
        bf16 = CastCompressor(bfloat16, is_float, dtype_of, cast, "bf16")

    return Compression


def _numpy_compression():
    import numpy as np

    def bfloat16():
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)

    return make_compression(
        # ml_dtypes' bfloat16 is no np.floating; its name tells it without importing it.
        is_float=lambda d: np.issubdtype(d, np.floating) or d.name == "bfloat16",
        dtype_of=lambda a: np.asarray(a).dtype,
        cast=lambda a, d: np.asarray(a).astype(d),
        float16=np.dtype(np.float16), bfloat16=bfloat16)


Compression = _numpy_compression()  # for numpy arrays (horovodlite.allreduce)
