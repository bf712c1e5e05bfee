"""Training state that survives a change of the world (Horovod 0.28's elastic State).

A state is saved in memory by commit() (and save()), put back by restore() after a
failure, and made the same on every rank by sync() (from rank 0) after the world was
re-formed. commit() is also where host changes are noticed: every rank raises
HostsUpdatedInterrupt at the same commit, because rank 0's verdict is broadcast."""
import copy

from . import hosts as _hosts


class HostsUpdatedInterrupt(RuntimeError):
    """Raised at a commit on every rank when the job's hosts changed: the run wrapper
    re-forms the world (without restoring: the state was just committed). `skip_sync`
    is True when no process joined, so every rank already has the state. `update`: the
    hosts.Update agreed at the commit (processes to join, ranks that leave)."""

    def __init__(self, skip_sync=False, update=None):
        super().__init__("the job's hosts changed; the world is re-formed at this commit")
        self.skip_sync = skip_sync
        self.update = update
        self.hosts = list(update.hosts) if update is not None else []  # one per process joining


class State:
    """Base class: subclasses say how to save, restore and sync what they hold."""

    def __init__(self, bcast_object=None, get_rank=None):
        self._reset_callbacks = []
        self._bcast_object = bcast_object
        self._get_rank = get_rank
        self.commits = 0  # commits made on this rank since the job started (kept across resets)

    def register_reset_callbacks(self, callbacks):
        """Functions called with no arguments after each reset of the world (after the
        state was synced), e.g. to scale the learning rate to the new hvd.size()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for cb in self._reset_callbacks:
            cb()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's notification hook; host changes are polled at commit here."""

    def commit(self):
        """Saves the state in memory, then checks for host changes (raising
        HostsUpdatedInterrupt on every rank when there are any)."""
        self.save()
        self.commits += 1
        self.check_host_updates()

    def check_host_updates(self):
        update = _hosts.agree_on_update()
        if update is not None:
            raise HostsUpdatedInterrupt(skip_sync=update.skip_sync, update=update)

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError

    def reset(self):
        """Called after the world was re-formed (before sync); framework states use it
        to rebuild what depends on the world's size."""


class ObjectState(State):
    """Picklable attributes (numbers, lists, numpy arrays, pytrees of them): each keyword
    becomes an attribute, saved by value (deep copy) and broadcast from rank 0 by
    sync()."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        if bcast_object is None:
            from ..objects import broadcast_object as bcast_object
        if get_rank is None:
            from ..basics import rank as get_rank
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        new_state = {}
        for attr in self._saved_state:
            new_state[attr] = copy.deepcopy(getattr(self, attr))
        self._saved_state = new_state

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, 0,
                                                   name="elastic.ObjectState")
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))
