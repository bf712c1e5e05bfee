"""numpy dtype <-> core DataType codes (bfloat16 is ml_dtypes.bfloat16).

The codes come from the core itself (`_core.DTYPE_CODES`, built from its enum), so
nothing here re-types a number; a frontend maps its own dtypes to these by name.

ml_dtypes is imported only when a dtype the maps do not know is first met: its import
takes 0.5 s, twice all of horovodlite's, in every process. A bfloat16 array can only
exist once ml_dtypes (or jax or tensorflow, which use it) was imported anyway."""
import numpy as np

from ._loader import _core

CODES = dict(_core.DTYPE_CODES)  # core dtype name ("int16", "bfloat16", ...) -> code
NAMES = {code: name for name, code in CODES.items()}
REDUCIBLE = frozenset(_core.REDUCIBLE_DTYPE_CODES.values())

UINT8, INT8, INT16, UINT16 = CODES["uint8"], CODES["int8"], CODES["int16"], CODES["uint16"]
INT32, INT64, BOOL = CODES["int32"], CODES["int64"], CODES["bool"]
FLOAT16, BFLOAT16 = CODES["float16"], CODES["bfloat16"]
FLOAT32, FLOAT64 = CODES["float32"], CODES["float64"]


_TO_CODE = {np.dtype(name): code for name, code in CODES.items() if name != "bfloat16"}
_FROM_CODE = {v: k for k, v in _TO_CODE.items()}
# The core's plain blocking allreduce (_core.allreduce_small) knows the reducible
# dtypes by their numpy dtype objects.
for _dt, _code in _TO_CODE.items():
    if _code in REDUCIBLE:
        _core.register_plain_dtype(_dt, _code)


def _know_bfloat16():
    """Adds ml_dtypes' bfloat16 to the maps; False if it was there already."""
    if BFLOAT16 in _FROM_CODE:
        return False
    import ml_dtypes

    _TO_CODE[np.dtype(ml_dtypes.bfloat16)] = BFLOAT16
    _FROM_CODE[BFLOAT16] = np.dtype(ml_dtypes.bfloat16)
    if BFLOAT16 in REDUCIBLE:
        _core.register_plain_dtype(np.dtype(ml_dtypes.bfloat16), BFLOAT16)
    return True


def supported_names(reducible=False):
    """The core's dtype names (in code order), only the reducible ones if asked."""
    return [NAMES[c] for c in sorted(NAMES) if not reducible or c in REDUCIBLE]


def code_of(dtype, reducible=False, what="tensor"):
    """The core's code for a numpy dtype; TypeError for what we do not support."""
    code = _TO_CODE.get(dtype)  # an np.dtype already, mostly: skip the conversion
    if code is None:
        try:
            code = _TO_CODE.get(np.dtype(dtype))
        except TypeError:
            code = None
        if code is None and _know_bfloat16():
            return code_of(dtype, reducible, what)
    if code is None or (reducible and code not in REDUCIBLE):
        raise TypeError(f"horovodlite: unsupported dtype {dtype} for {what}; "
                        f"supported: {', '.join(supported_names(reducible))}")
    return code


def numpy_dtype(code):
    if code == BFLOAT16:
        _know_bfloat16()
    return _FROM_CODE[code]
