"""Which hosts an elastic job may use, and the decision (taken by rank 0 at a commit,
broadcast so every rank acts on the same one) to grow onto them.

`horovodlite-run --elastic` passes its settings to the ranks as environment variables:
HOROVODLITE_ELASTIC_DISCOVERY (the host discovery script: prints `host:slots` lines),
HOROVODLITE_ELASTIC_MIN_NP / _MAX_NP, HOROVODLITE_ELASTIC_RESET_LIMIT. Rank 0 runs the
script in a background thread (every HOROVODLITE_ELASTIC_DISCOVERY_INTERVAL seconds,
default 1), so a commit only reads its last answer.

When discovery reports more slots, rank 0 starts processes for them while training
goes on, and they join at the first commit after they are ready; when a host reports
fewer slots (or is gone), its highest ranks leave at a commit and exit, the others go
on without them. Host names must be the hosts' own (socket.gethostname(), or
HOROVODLITE_HOSTNAME_OVERRIDE; "localhost" is this machine).

A failed process is never reused, but its host keeps its slots: a new process may be
spawned there. A host is set aside for HOROVODLITE_ELASTIC_COOLDOWN_SECONDS (default 60)
only when spawning on it failed, or when it lost HOROVODLITE_ELASTIC_HOST_FAILURES
(default 3) processes."""
import collections
import os
import socket
import subprocess
import threading
import time

from . import world

# A host update agreed at a commit: `hosts`, one name per process started for the job
# (they wait to be joined); `remove`, ranks that leave; `skip_sync`: no process joins.
Update = collections.namedtuple("Update", "hosts remove skip_sync")


def _setting(name):
    # From the settings hvd.init() read (once per init, not through the core at every
    # commit): the launcher sets them for the job, and a spawned worker's environment
    # is the launcher's, so every rank has the same values.
    return world.setting("ELASTIC_" + name)


def discovery_script():
    return _setting("DISCOVERY") or None


def min_np():
    return _setting("MIN_NP")


def max_np():
    return _setting("MAX_NP") or None


def reset_limit():
    return _setting("RESET_LIMIT") or None


def elastic_timeout():
    return _setting("TIMEOUT")


def parse_hosts(text, canonical=True):
    """`host:slots` lines (a bare host has one slot) -> {host: slots}, in order; with
    `canonical`, this machine is named as the engine names it."""
    hosts = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, slots = line.rpartition(":") if ":" in line else (line, "", "1")
        try:
            n = int(slots)
        except ValueError:
            raise ValueError(f"host discovery: bad line {line!r} (expected host:slots)") from None
        name = _canonical(name.strip()) if canonical else name.strip()
        if not name or n < 0:
            raise ValueError(f"host discovery: bad line {line!r} (expected host:slots)")
        hosts[name] = hosts.get(name, 0) + n
    return hosts


def _canonical(name):
    """This machine under whatever name the engine gives it ('localhost' in a script)."""
    if name in ("localhost", "127.0.0.1", "::1", socket.gethostname()):
        return world.host_name()
    return name


class _Discovery:
    """Runs the discovery script in the background (on rank 0 only)."""

    def __init__(self, script, interval):
        self.script, self.interval = script, interval
        self.hosts, self.error = None, None
        self._have = threading.Event()
        threading.Thread(target=self._loop, name="horovodlite-discovery", daemon=True).start()

    def _loop(self):
        while True:
            try:
                out = subprocess.run(self.script, shell=True, capture_output=True, text=True,
                                     timeout=max(30.0, self.interval))
                if out.returncode != 0:
                    raise RuntimeError(f"exited with {out.returncode}: {out.stderr.strip()[-300:]}")
                self.hosts, self.error = parse_hosts(out.stdout), None
            except Exception as e:  # reported when it matters, the last answer stays
                self.error = f"host discovery script {self.script!r}: {e}"
            self._have.set()
            time.sleep(self.interval)

    def answered(self):
        """Whether the script has answered (or failed) at least once."""
        return self._have.is_set()

    def latest(self, wait=0.0):
        self._have.wait(wait)
        return self.hosts


_discovery = {"d": None}
_set_aside = {}      # host -> time until which it is not used
_failures = collections.Counter()  # host -> processes lost there


def _discover(wait=0.0):
    """The last answer of the discovery script (None: none yet, or no script). A caller
    that waits (`wait` > 0: for --min-np) waits up to 30 s for the first answer; a
    commit never does."""
    script = discovery_script()
    if script is None:
        return None
    if _discovery["d"] is None:
        _discovery["d"] = _Discovery(script, _setting("DISCOVERY_INTERVAL"))
    d = _discovery["d"]
    if wait > 0 and not d.answered():
        wait = max(wait, 30.0)  # the first answer
    return d.latest(wait)


def start_discovery():
    """On rank 0 when train() is (re)entered: the script's first run starts now, so the
    first commit finds an answer instead of waiting for one (that wait held every rank
    at the first commit for a whole script run: ~70 ms for `echo` at load 10, a slow
    script's seconds). Other ranks never run it."""
    from ..basics import rank

    if discovery_script() is not None and rank() == 0:
        _discover()


def note_lost(hosts):
    """Counted on every rank alike (the list comes from an allgather)."""
    limit = _setting("HOST_FAILURES")
    for h in hosts:
        _failures[h] += 1
        if _failures[h] >= limit:
            set_aside(h)


def set_aside(host):
    _set_aside[host] = time.monotonic() + _setting("COOLDOWN_SECONDS")
    _failures[host] = 0


def usable(host):
    until = _set_aside.get(host)
    if until is not None and time.monotonic() >= until:
        del _set_aside[host]
        until = None
    return until is None


def _free_slots(found):
    """On rank 0: one host name per process that could be started now on the hosts
    `found` (counting those being started), within --max-np."""
    running = collections.Counter(world.running_hosts())
    pending = world.growth()
    if pending is not None:
        running.update(pending.hosts)
    cap = max_np()
    room = (cap - sum(running.values())) if cap else None
    out = []
    for host, slots in found.items():
        if not usable(host):
            continue
        for _ in range(max(0, slots - running.get(host, 0))):
            if room is not None and len(out) >= room:
                return out
            out.append(host)
    return out


def plan_growth(wait=0.0):
    """On rank 0: one host per process to start now ([] for none)."""
    found = _discover(wait)
    return _free_slots(found) if found else []


def plan_removal(found):
    """On rank 0: the ranks that leave because their host reports fewer slots than it
    runs (the highest ranks there leave first) or is missing from the discovery output.
    Names must be the hosts' own (as the ranks report them), as for growth. An answer
    that would leave no rank (an empty output) is taken for a glitch of the script."""
    if not found:
        return []
    hosts = world.running_hosts()
    leave = []
    for host in dict.fromkeys(hosts):
        ranks = [r for r, h in enumerate(hosts) if h == host]
        keep = found.get(host, 0)
        leave += ranks[keep:] if keep < len(ranks) else []
    return sorted(leave) if len(leave) < len(hosts) else []


def _verdict():
    """On rank 0, at a commit: what to do now. ("join",) once the processes started
    earlier all wait in hvd.init(); ("remove", ranks) when hosts report fewer slots;
    ("spawn", hosts) for free slots; None for nothing."""
    pending = world.growth()
    if pending is not None:
        return ("join",) if pending.ready() else None
    found = _discover()
    if not found:
        return None
    leave = plan_removal(found)
    if leave:
        return ("remove", leave)
    plan = _free_slots(found)
    return ("spawn", plan) if plan else None


# The verdict rank 0 took at the last commit, in flight to every rank: (world it was
# posted on, handle of the flag's broadcast, the flag, rank 0's verdict).
_posted = {"at": None}


def agree_on_update():
    """At a commit, on every rank: acts on the verdict rank 0 took at the previous
    commit, returning the Update that interrupts training (None: training goes on).

    Whether rank 0 has a verdict travels as an 8-byte broadcast posted at one commit
    and waited for at the next: it runs in the engine alongside the training steps in
    between, so a commit with no host change waits for no round of its own (a host
    change is acted on one commit later, on every rank at the same commit). Only when
    the flag is set does the verdict itself travel (one more round). A commit that
    starts processes takes about a second (they join later)."""
    if discovery_script() is None:
        return None
    world.running_hosts()  # collective the first time; every rank is here
    flag, verdict = _take_posted()
    if flag:
        from ..objects import broadcast_object

        verdict = broadcast_object(verdict, 0, name="elastic.host_update")
        if verdict[0] == "join":
            return Update(world.growth().hosts, [], False)
        if verdict[0] == "remove":
            return Update([], verdict[1], True)
        if _start(verdict[1]) and not world.grows_in_background():
            # HOROVODLITE_ELASTIC_GROW_IN_BACKGROUND=0: they join now, every rank waiting.
            return Update(verdict[1], [], False)
    _post()
    return None


def _post():
    """Rank 0 takes its verdict now; every rank starts the flag's broadcast."""
    import numpy as np

    from ..basics import rank
    from ..ops import broadcast_async_

    verdict = _verdict() if rank() == 0 else None
    flag = np.array([verdict is not None], dtype=np.int64)
    handle = broadcast_async_(flag, 0, name="elastic.host_update.any")
    _posted["at"] = (world.comm(), handle, flag, verdict)


def _take_posted():
    """(flag, rank 0's verdict) posted at the last commit on this world; (False, None)
    when there is none (the first commit, or the world was re-formed since: a flag
    posted on the old one is dropped there by every rank alike)."""
    from .. import handles

    at, _posted["at"] = _posted["at"], None
    if at is None:
        return False, None
    comm, handle, flag, verdict = at
    if comm is not world.comm():
        # Failed or finished with the old engine; its arrays stay alive until it is done.
        handles.orphan([handle])
        return False, None
    handles.synchronize(handle)  # raises HorovodInternalError if a peer failed
    return bool(flag[0]), verdict


def finish():
    """At the end of training: waits for the flag the last commit posted (on this world),
    so no collective of ours is still running when the rank leaves."""
    _take_posted()


def _start(plan):
    """Collective: starts processes on the hosts of `plan`; hosts where that fails
    are set aside (spawn errors are collective, so on every rank alike)."""
    try:
        world.start_growth(plan)
        return True
    except world.mpi().Exception as e:
        import logging

        logging.getLogger("horovodlite.elastic").warning(
            "horovodlite elastic: could not start processes on %s (%s); setting them aside",
            sorted(set(plan)), e)
        for h in set(plan):
            set_aside(h)
        return False


def wait_for_min_np(grow):
    """After a reset left fewer than min-np processes: until HOROVODLITE_ELASTIC_TIMEOUT,
    grow onto hosts discovery reports (grow(hosts) is collective; processes rank 0 was
    starting already are joined first); then fail on every rank with a message."""
    from ..basics import rank, size
    from ..objects import broadcast_object

    need = min_np()
    if size() >= need:
        return
    deadline = time.monotonic() + elastic_timeout()
    while True:
        plan = None
        if rank() == 0:
            pending = world.growth()
            plan = pending.hosts if pending is not None else plan_growth(wait=1.0)
            if not plan and time.monotonic() > deadline:
                plan = "timeout"
        plan = broadcast_object(plan, 0, name="elastic.min_np")
        if plan == "timeout" or (plan == [] and discovery_script() is None):
            d = _discovery["d"]
            why = f"; {d.error}" if d is not None and d.error else ""
            raise RuntimeError(
                f"horovodlite elastic: {size()} processes left (on {sorted(set(world.running_hosts()))}), "
                f"fewer than --min-np {need}, and "
                + ("no host discovery script to find more" if discovery_script() is None else
                   f"discovery reported no free slots within {elastic_timeout():g} s "
                   f"(HOROVODLITE_ELASTIC_TIMEOUT){why}"))
        if plan and (world.growth() is not None or _start(plan)):
            grow(plan)  # waits for them to reach hvd.init()
            if size() >= need:
                return
        elif rank() == 0:
            time.sleep(1.0)
