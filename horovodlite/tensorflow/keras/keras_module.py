"""Which Keras horovodlite.tensorflow.keras works with: the one `tf.keras` is.

TensorFlow 2.16+ makes `tf.keras` Keras 3 unless TF_USE_LEGACY_KERAS is set, in which
case it is tf_keras (Keras 2, the `tf-keras` package), the Keras Horovod 0.28 supports.
We read the variable the way TensorFlow does, so the callbacks subclass the Callback
class the user's model.fit expects. Optimizers are dispatched by their own class
(optimizer.py for Keras 3, optimizer_keras2.py for Keras 2), so a Keras 2 optimizer
works whichever was selected."""
import os

LEGACY_REQUESTED = os.environ.get("TF_USE_LEGACY_KERAS", None) in ("true", "True", "1")

if LEGACY_REQUESTED:
    try:
        import tf_keras as keras
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("TF_USE_LEGACY_KERAS=1 selects tf_keras (Keras 2), which is not "
                          "installed: pip install tf-keras") from e
else:
    import keras

IS_KERAS3 = int(keras.__version__.split(".")[0]) >= 3


def is_keras3_optimizer(optimizer):
    """True for Keras 3 optimizers, False for Keras 2 ones (tf_keras, new or legacy)."""
    try:
        import keras as k3
    except ImportError:  # pragma: no cover
        return False
    return int(k3.__version__.split(".")[0]) >= 3 and isinstance(optimizer,
                                                                   k3.optimizers.Optimizer)


def is_keras2_optimizer(optimizer):
    mods = [keras] if not IS_KERAS3 else []
    try:
        import tf_keras

        mods.append(tf_keras)
    except ImportError:  # pragma: no cover
        pass
    for m in mods:
        bases = [m.optimizers.Optimizer]
        legacy = getattr(getattr(m.optimizers, "legacy", None), "Optimizer", None)
        if legacy is not None:
            bases.append(legacy)
        if isinstance(optimizer, tuple(bases)):
            return True
    return False


def layer_classes():
    """Keras Layer base classes of every Keras installed (3 and 2)."""
    classes = [keras.layers.Layer]
    for mod in ("keras", "tf_keras"):
        try:
            classes.append(__import__(mod).layers.Layer)
        except ImportError:  # pragma: no cover
            pass
    return tuple(classes)


def optimizer_variables(optimizer):
    """An optimizer's variables: a property in Keras 3 and tf_keras's new optimizers, a
    method in the legacy ones."""
    v = optimizer.variables
    return list(v() if callable(v) else v)


def build_optimizer(optimizer, trainable_variables):
    """Creates the optimizer's slots now, as its first apply would, so they can be
    broadcast before training starts."""
    import tensorflow as tf

    if hasattr(optimizer, "_create_all_weights"):  # Keras 2 legacy (OptimizerV2)
        with tf.init_scope():
            optimizer._create_all_weights(list(trainable_variables))
        return
    if getattr(optimizer, "built", False) or getattr(optimizer, "_built", False):
        return
    if is_keras3_optimizer(optimizer):
        import keras as k3

        with k3.name_scope(optimizer.name, caller=optimizer):
            optimizer.build(list(trainable_variables))
        optimizer.built = True
        return
    with tf.init_scope():
        optimizer.build(list(trainable_variables))
