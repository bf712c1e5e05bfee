"""Elastic training for JAX: `run` and `ObjectState`, which holds pytrees (parameters,
optax states) by value: saved by copy at commit, broadcast from rank 0 by sync()."""
import functools

from ..elastic import HostsUpdatedInterrupt, ObjectState, State, run_fn  # noqa: F401


def run(func):
    """Like horovodlite.elastic.run; an XLA runtime error from a failed peer's collective
    (inside jit) counts as HorovodInternalError."""
    from ..basics import HorovodInternalError

    def translated(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except HorovodInternalError:
            raise
        except Exception as e:
            msg = str(e)
            if type(e).__name__ in ("XlaRuntimeError", "JaxRuntimeError") and "horovodlite: rank" in msg:
                raise HorovodInternalError(msg) from e
            raise

    return run_fn(functools.wraps(func)(translated))
