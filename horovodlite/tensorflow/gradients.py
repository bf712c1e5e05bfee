"""Reducing a list of gradients across ranks: shared by DistributedGradientTape and the
Keras DistributedOptimizers. Dense gradients go to the core in one hand-off (the core fuses
them); tf.IndexedSlices are allgathered unless sparse_as_dense. Gradients of variables
registered as worker-local (model parallelism: register_local_var / register_local_source,
the Partial* wrappers) are not communicated; like Horovod, they are divided by the set
size when scale_local_gradients, so they stay on the scale of the averaged ones."""
import tensorflow as tf

from .. import ops as _np_ops
from . import handoff, mpi_ops


class ReduceSettings:
    """What DistributedGradientTape / DistributedOptimizer were asked to do."""

    def __init__(self, compression, sparse_as_dense, op, gradient_predivide_factor,
                 num_groups, groups, process_set, scale_local_gradients=True):
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = _np_ops.resolve_op(op, None)
        self.prescale, self.postscale = _np_ops.predivide_scales(self.op, gradient_predivide_factor)
        if groups is None and num_groups:
            groups = int(num_groups)
        if isinstance(groups, int) and groups < 0:
            raise ValueError(f"horovodlite: groups must be a non-negative int, got {groups}")
        if groups is not None and not isinstance(groups, int):
            groups = [list(g) for g in groups]
        self.groups = groups
        self.process_set = process_set
        self.scale_local_gradients = bool(scale_local_gradients)
        self.local_refs = set()  # var.ref() of worker-local variables

    def register_local(self, variable):
        self.local_refs.add(variable_key(variable))

    def is_local(self, variable):
        return variable is not None and variable_key(variable) in self.local_refs

    def scale(self):
        """(op, prescale, postscale) the core applies."""
        return self.op, self.prescale, self.postscale

    def group_names(self, dense_positions, variables, base):
        """Group name ('' = alone) for each dense gradient, by its position in the list."""
        if not self.groups:
            return [""] * len(dense_positions)
        if isinstance(self.groups, int):
            n = len(dense_positions)
            k = min(self.groups, n) or 1
            # Contiguous, near-equal chunks: the first n % k chunks get one more.
            bounds, start = [], 0
            for j in range(k):
                stop = start + n // k + (1 if j < n % k else 0)
                bounds.extend([f"{base}.group{j}"] * (stop - start))
                start = stop
            return bounds
        which = {}
        for j, group in enumerate(self.groups):
            for v in group:
                which[id(v)] = f"{base}.group{j}"
        names = []
        for i in dense_positions:
            v = variables[i] if variables is not None and i < len(variables) else None
            names.append(which.get(id(v), "") if v is not None else "")
        return names


def allreduce_gradients(grads, variables, settings, base):
    """Reduced gradients in the same order; None stays None (not communicated)."""
    op, pre, post = settings.scale()
    out = list(grads)
    dense_pos, dense, ctxs = [], [], []
    for i, g in enumerate(grads):
        if g is None:
            continue
        if settings.local_refs and variables is not None and i < len(variables) \
                and settings.is_local(variables[i]):
            out[i] = _scaled_local(g, settings)
            continue
        if isinstance(g, tf.IndexedSlices):
            if not settings.sparse_as_dense:
                out[i] = mpi_ops._allreduce_sparse(g, f"{base}.{i}", op, pre, post,
                                                   settings.process_set)
                continue
            g = tf.convert_to_tensor(g)
        c, ctx = settings.compression.compress(tf.convert_to_tensor(g))
        dense_pos.append(i)
        dense.append(c)
        ctxs.append(ctx)
    groups = settings.group_names(dense_pos, variables, base)
    reduced = mpi_ops._allreduce_dense(dense, [f"{base}.{i}" for i in dense_pos], groups, op,
                                       pre, post, settings.process_set)
    for i, r, ctx in zip(dense_pos, reduced, ctxs):
        out[i] = settings.compression.decompress(r, ctx)
    return out


def variable_key(v):
    """A hashable identity for a variable: tf.Variable.ref(); Keras 3 variables have no
    ref() but wrap a tf.Variable, whose ref is used, so both spellings match."""
    if not hasattr(v, "ref"):
        inner = getattr(v, "value", None)
        if hasattr(inner, "ref"):
            v = inner
    return v.ref() if hasattr(v, "ref") else id(v)


def _scaled_local(g, settings):
    if not settings.scale_local_gradients:
        return g
    size = settings.process_set.size()
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values / tf.cast(size, g.values.dtype), g.indices,
                                g.dense_shape)
    g = tf.convert_to_tensor(g)
    return g / tf.cast(size, g.dtype)


def local_variables_of(local_layers):
    """The trainable variables of `local_layers` (a Keras layer or a list of them; Keras 3
    or Keras 2)."""
    from .keras.keras_module import layer_classes

    classes = layer_classes()
    if local_layers is None:
        return []
    if isinstance(local_layers, classes):
        local_layers = [local_layers]
    local_layers = list(local_layers)
    for layer in local_layers:
        if not isinstance(layer, classes):
            raise ValueError("horovodlite: local_layers must be Keras layers, got "
                             f"{type(layer).__name__}")
    return [v for layer in local_layers for v in layer.trainable_weights]


def base_name(kind):
    """Stable per call site: the same every step (so the core's response cache hits)."""
    return kind if tf.executing_eagerly() else handoff.op_name(kind, None)
