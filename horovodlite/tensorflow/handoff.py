"""How tf tensors reach the core and come back, with as few copies as TensorFlow allows.

Measured on TF 2.21 (CPU tensors):
- In: `np.asarray(eager_tensor)` goes through `__array__` -> `_numpy()`, a read-only
  numpy view of TensorFlow's own buffer (no copy, under 1 us at any size). `tensor.numpy()`
  copies by design, so it is never used here. TF's buffers are 64-byte aligned, which
  also keeps the core's copies off glibc's slow misaligned memcpy path.
- Out: the core writes into a numpy array we allocate 64-byte aligned; DLPack
  (`tf.experimental.dlpack.from_dlpack`) then hands that buffer to TensorFlow without a
  copy (~1 us), whereas `tf.convert_to_tensor(ndarray)` copies (22 ms at 64 MiB).
  TensorFlow aborts the process on a misaligned DLPack buffer, so `to_tf` copies anything
  not 64-byte aligned first. bfloat16 is not a DLPack type: it travels as uint16 and is
  bitcast back (a view, not a copy).
- Inside tf.function the collective is a `tf.numpy_function`: TensorFlow passes its input
  buffers as numpy views and takes aligned numpy results without a copy, so the graph path
  costs only TensorFlow's py-func dispatch, about 0.3 ms per op on a busy 2-core machine
  (benchmarks/tf_handoff.py); eager calls cost within noise of the numpy API. That is why
  DistributedGradientTape and DistributedOptimizer hand all gradients over in one op.

One graph op runs a whole list of collectives (enqueue every one, then wait for all):
the op blocks its inter-op thread until the peers take part, and tf.function runs stateful
ops in program order, so every rank meets its collectives in the same order and a
blocked op can never wait on one its peer has not reached.
"""
import re
import weakref

import numpy as np
import tensorflow as tf

from .. import dtypes as _dtypes
from ..handles import auto_name
from ..ops import _aligned_empty as aligned_empty

ALIGN = 64


def numpy_dtype(tf_dtype, reducible=False, what="tensor"):
    """numpy dtype of a tf dtype, checked against what the core supports (TypeError)."""
    tf_dtype = tf.as_dtype(tf_dtype)
    if not tf_dtype.is_numpy_compatible or tf_dtype in (tf.string, tf.resource, tf.variant):
        raise TypeError(f"horovodlite: unsupported dtype {tf_dtype.name} for {what}")
    dt = np.dtype(tf_dtype.as_numpy_dtype)
    _dtypes.code_of(dt, reducible=reducible, what=what)
    return dt


def to_numpy(t):
    """Read-only numpy view of an eager tensor's buffer (copied only off the CPU)."""
    if isinstance(t, tf.Variable):
        t = t.read_value()  # shares the variable's buffer (copy-on-write in TF)
    elif not isinstance(t, tf.Tensor):
        t = tf.convert_to_tensor(t)
    return np.asarray(t)


def to_tf(a, device=None):
    """An eager tensor over `a`'s memory (copied only if not 64-byte aligned)."""
    if a.size == 0:
        return tf.zeros(a.shape, tf.as_dtype(a.dtype))
    if a.ctypes.data % ALIGN or not a.flags.c_contiguous or not a.flags.writeable:
        b = aligned_empty(a.shape, a.dtype)
        np.copyto(b, a)
        a = b
    if a.dtype == _dtypes.numpy_dtype(_dtypes.BFLOAT16):
        t = tf.bitcast(tf.experimental.dlpack.from_dlpack(a.view(np.uint16).__dlpack__()),
                       tf.bfloat16)
    else:
        t = tf.experimental.dlpack.from_dlpack(a.__dlpack__())
    if device and "GPU" in device.upper():
        with tf.device(device):
            t = tf.identity(t)
    return t


def _for_graph(a):
    """A result numpy_function can take over without copying."""
    if a.ctypes.data % ALIGN == 0 or a.size == 0:
        return a
    b = aligned_empty(a.shape, a.dtype)
    np.copyto(b, a)
    return b


def run(fn, inputs, out_dtypes, out_shapes):
    """Runs `fn` (numpy arrays in, list of numpy arrays out; it enqueues collectives and
    waits for them) on tf tensors: directly when eager, as one stateful numpy_function
    inside a graph. Returns a list of tf tensors with `out_shapes` set."""
    if tf.executing_eagerly():
        device = getattr(inputs[0], "device", None) if inputs else None
        return [to_tf(o, device) for o in fn(*[to_numpy(t) for t in inputs])]

    _check_not_xla()

    def graph_fn(*arrays):
        return [_for_graph(o) for o in fn(*arrays)]

    g = tf.compat.v1.get_default_graph()
    # A graph run by a TF1 Session executes stateful ops in no particular order, on a
    # pool of (cores) threads: each collective blocks its thread until every rank has
    # submitted it, so ranks that started different collectives first waited for each
    # other forever (seen with several allgathers in one session.run). Chaining them in
    # creation order makes every rank run them in the same order. tf.function graphs
    # order stateful ops themselves.
    chain = not hasattr(g, "capture")  # FuncGraph (tf.function) has capture()
    last = _last_op.get(g) if chain else None
    with tf.control_dependencies([last] if last is not None else []):
        outs = tf.numpy_function(graph_fn, list(inputs), list(out_dtypes), stateful=True,
                                 name="horovodlite")
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    if chain and outs:
        _last_op[g] = outs[0].op
    for o, s in zip(outs, out_shapes):
        o.set_shape(s)
    return list(outs)


def tape_may_record():
    """False when no GradientTape could record an eager op (TF's own check; private API,
    so anything unexpected answers True and keeps gradients working)."""
    try:
        from tensorflow.python.eager import record

        return bool(record.could_possibly_record())
    except Exception:  # noqa: BLE001
        return True


def _check_not_xla():
    from tensorflow.python.ops import control_flow_util

    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        raise RuntimeError(
            "horovodlite collectives cannot run inside an XLA-compiled function (its ops are "
            "tf.numpy_function calls): use tf.function(jit_compile=False), or for Keras "
            "model.compile(..., jit_compile=False)")


_graph_counters = weakref.WeakKeyDictionary()
_last_op = weakref.WeakKeyDictionary()  # graph -> its last collective op (see run)


def op_name(kind, name, process_set=None):
    """The name a collective is matched by across ranks. Given names are used as they are.
    Unnamed eager calls are numbered in call order (like the numpy API). Unnamed ops in a
    graph are numbered per graph at trace time and named after the function, so they do
    not depend on what else a rank happened to trace, and each run of the graph reuses
    its names (which keeps the core's response cache warm)."""
    if name is not None:
        return str(name)
    if tf.executing_eagerly():
        return auto_name(kind, None, process_set)
    g = tf.compat.v1.get_default_graph()
    counters = _graph_counters.setdefault(g, {})
    n = counters.get(kind, 0)
    counters[kind] = n + 1
    scope = re.sub(r"_\d+$", "", getattr(g, "name", None) or "graph")
    return f"{kind}.{scope}.{n}"
