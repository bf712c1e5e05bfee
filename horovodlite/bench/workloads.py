"""What the benchmark moves: message sizes, test patterns and ResNet-50's gradients."""
import numpy as np


def parse_bytes(s):
    s = str(s).strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s.rstrip("KMG")) * mult)


def human(b):
    for unit, f in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= f and b % (f // 1024 or 1) == 0:
            return f"{b / f:g} {unit}iB"
    return f"{b} B"


def sweep(lo, hi, factor=4):
    out, s = [], parse_bytes(lo)
    while s <= parse_bytes(hi):
        out.append(s)
        s *= factor
    return out


def pattern(rank, count, dtype=np.float32):
    """Small integers: any summation order gives the same bits, so a result is right
    or wrong, never approximately right."""
    return ((np.arange(count) % 13) + 3 * rank + 1).astype(dtype)


def _resnet50_parameter_shapes():
    """torchvision.models.resnet50().named_parameters(), in order (161 tensors,
    25,557,032 float32): conv weights (no bias), batch-norm weight and bias, fc."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    cin = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            out = width * 4
            shapes += [(width, cin, 1, 1), (width,), (width,),
                       (width, width, 3, 3), (width,), (width,),
                       (out, width, 1, 1), (out,), (out,)]
            if b == 0:  # downsample: 1x1 conv + batch norm
                shapes += [(out, cin, 1, 1), (out,), (out,)]
            cin = out
    shapes += [(1000, 2048), (1000,)]
    return shapes


RESNET50_SHAPES = _resnet50_parameter_shapes()
assert len(RESNET50_SHAPES) == 161
assert sum(int(np.prod(s)) for s in RESNET50_SHAPES) == 25_557_032
