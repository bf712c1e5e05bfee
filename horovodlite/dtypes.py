"""numpy dtype <-> core DataType codes (bfloat16 is ml_dtypes.bfloat16)."""
import ml_dtypes
import numpy as np

UINT8, INT8, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64, BOOL = range(9)

_TO_CODE = {
    np.dtype(np.uint8): UINT8, np.dtype(np.int8): INT8, np.dtype(np.int32): INT32,
    np.dtype(np.int64): INT64, np.dtype(np.float16): FLOAT16,
    np.dtype(ml_dtypes.bfloat16): BFLOAT16, np.dtype(np.float32): FLOAT32,
    np.dtype(np.float64): FLOAT64, np.dtype(np.bool_): BOOL,
}
_FROM_CODE = {v: k for k, v in _TO_CODE.items()}
REDUCIBLE = {UINT8, INT8, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64}


def code_of(dtype, reducible=False, what="tensor"):
    """The core's code for a numpy dtype; TypeError for what we do not support."""
    code = _TO_CODE.get(dtype)  # an np.dtype already, mostly: skip the conversion
    if code is None:
        code = _TO_CODE.get(np.dtype(dtype))
    if code is None or (reducible and code not in REDUCIBLE):
        allowed = sorted(str(d) for d, c in _TO_CODE.items() if not reducible or c in REDUCIBLE)
        raise TypeError(f"horovodlite: unsupported dtype {np.dtype(dtype)} for {what}; "
                        f"supported: {', '.join(allowed)}")
    return code


def numpy_dtype(code):
    return _FROM_CODE[code]
