"""A cluster of simulated hosts on this machine, for trying and testing multi-host jobs.

Each host is a network namespace whose processes also get a hostname of their own (a UTS
namespace, entered by the rsh agent), so horovodlite and MPI see separate hosts. Every host
has one veth link into a bridge in the root namespace, shaped with `tc tbf` at the link rate
in both directions, so every byte between hosts crosses a rate-limited TCP path, as between
real machines. mpirun (in the root namespace) starts its daemons through an rsh agent that
enters the namespace, as ssh would log into a host:

    with LocalCluster(2, 2, link_rate="1gbit") as c:
        subprocess.run([mpirun, *c.mpirun_args(), "-n", "4", "python", "train.py"])

Addresses: one private /24 that no interface or route of this machine overlaps (checked
under a lock, so concurrent clusters get different ones); the bridge is .1 and host i is
.(i+1). Nothing else is touched. close() removes every namespace, veth, bridge and file it
made, and kills what still runs inside the namespaces; a cluster whose owner was killed
outright is swept by the next one that starts. Needs root (CAP_NET_ADMIN)."""
import fcntl
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

# 10.213.N.0/24, N = 1..250: one cluster per N; N also names everything the cluster makes.
_NET_PREFIX = "10.213"
_STATE_DIR = Path(tempfile.gettempdir()) / "horovodlite-local-cluster"
_NAME = re.compile(r"^hvdl(\d+)-")
_SPEC = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")
_MAX_HOSTS = 64
_TIMEOUT = 20  # seconds for any one ip/tc command


class ClusterError(RuntimeError):
    """A one-line reason the cluster could not be made; nothing of it is left behind."""


def parse_spec(spec):
    """'HOSTSxSLOTS' -> (hosts, slots)."""
    m = _SPEC.match(str(spec))
    if not m:
        raise ClusterError(f"--local-cluster {spec!r}: expected HOSTSxSLOTS, e.g. 2x2")
    hosts, slots = int(m.group(1)), int(m.group(2))
    if not 1 <= hosts <= _MAX_HOSTS or slots < 1:
        raise ClusterError(f"--local-cluster {spec!r}: need 1..{_MAX_HOSTS} hosts and at least "
                           f"1 slot each, got {hosts} hosts x {slots} slots")
    return hosts, slots


_RATE_UNITS = {  # tc's spelling -> bytes per second per unit
    "bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "tbit": 1e12 / 8,
    "kibit": 1024 / 8, "mibit": 1024 ** 2 / 8, "gibit": 1024 ** 3 / 8, "tibit": 1024 ** 4 / 8,
    "bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12,
    "kibps": 1024, "mibps": 1024 ** 2, "gibps": 1024 ** 3, "tibps": 1024 ** 4,
}


def parse_rate(rate):
    """tc's rate spelling ('1gbit', '100mbit', '125mbps') -> bytes per second."""
    m = re.match(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$", str(rate))
    unit = m and (m.group(2).lower() or "bit")
    if not m or unit not in _RATE_UNITS or float(m.group(1)) <= 0:
        raise ClusterError(f"--link-rate {rate!r}: expected a positive rate in tc's units, "
                           "e.g. 1gbit, 100mbit, 10gbit")
    return float(m.group(1)) * _RATE_UNITS[unit]


def parse_time(value):
    """'0.2ms', '50us', '1s' -> seconds."""
    m = re.match(r"^\s*([0-9]*\.?[0-9]+)\s*(s|ms|us|usec|msec|sec)?\s*$", str(value))
    if not m:
        raise ClusterError(f"--link-delay {value!r}: expected a time such as 0.2ms or 50us")
    scale = {"s": 1, "sec": 1, "ms": 1e-3, "msec": 1e-3, "us": 1e-6, "usec": 1e-6}[m.group(2) or "s"]
    return float(m.group(1)) * scale


def _run(cmd, what=None):
    """Runs an ip/tc command; a failure becomes a ClusterError quoting its message."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT)
    except FileNotFoundError:
        raise ClusterError(f"local cluster: {cmd[0]!r} not found (needs iproute2 and util-linux)")
    except subprocess.TimeoutExpired:
        raise ClusterError(f"local cluster: `{' '.join(cmd)}` did not finish in {_TIMEOUT}s")
    if p.returncode != 0:
        msg = (p.stderr or p.stdout).strip().splitlines()
        raise ClusterError(f"{what or 'local cluster'}: `{' '.join(cmd)}` failed: "
                           f"{msg[0] if msg else 'exit code %d' % p.returncode}")
    return p.stdout


def _quiet(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _networks_in_use():
    """Every network this machine has an address or a route in (root namespace)."""
    nets = []
    for cmd in (["ip", "-j", "addr"], ["ip", "-j", "route", "show", "table", "all"]):
        try:
            data = json.loads(_run(cmd) or "[]")
        except (ClusterError, ValueError):
            continue
        for item in data:
            for a in item.get("addr_info", []):
                if a.get("family") == "inet":
                    nets.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
            dst = item.get("dst")
            if dst and dst != "default" and ":" not in dst:
                try:
                    nets.append(ipaddress.ip_network(dst, strict=False))
                except ValueError:
                    pass
            elif dst == "default":
                pass  # the default route overlaps everything by design; real routes are listed
    return nets


def _names_in_use():
    """Numbers N of hvdlN-* namespaces and links that exist now."""
    return {int(_NAME.match(n).group(1)) for n in leftovers()}


def netem_available():
    """Whether this kernel has the netem qdisc (tried on a throwaway dummy link)."""
    probe = f"hvdlprobe{os.getpid() % 100000}"
    if not _quiet(["ip", "link", "add", probe, "type", "dummy"]):
        return False
    try:
        return _quiet(["tc", "qdisc", "add", "dev", probe, "root", "netem", "delay", "1ms"])
    finally:
        _quiet(["ip", "link", "del", probe])


class LocalCluster:
    """HOSTS simulated hosts with SLOTS slots each (or a list: slots of each host); a
    context manager (see the module doc)."""

    def __init__(self, hosts, slots, link_rate="1gbit", link_delay=None, mtu=None):
        self.hosts = int(hosts)
        self.host_slots = [int(x) for x in slots] if isinstance(slots, (list, tuple)) \
            else [int(slots)] * self.hosts
        self.slots = self.host_slots[0] if self.host_slots else 0
        if not 1 <= self.hosts <= _MAX_HOSTS or len(self.host_slots) != self.hosts \
                or min(self.host_slots) < 1:
            raise ClusterError(f"local cluster: need 1..{_MAX_HOSTS} hosts and at least 1 slot "
                               f"each, got {hosts} x {slots}")
        self.link_rate = link_rate
        self.rate_bytes = parse_rate(link_rate) if link_rate else None
        # tbf's bucket: 2 ms of traffic, at least 256 KiB (see _shape).
        self.burst_bytes = max(256 * 1024, int(self.rate_bytes * 0.002)) if self.rate_bytes else 0
        self.link_delay = link_delay
        self.delay_s = parse_time(link_delay) if link_delay else 0.0
        self.mtu = int(mtu) if mtu else None
        if self.mtu is not None and not 576 <= self.mtu <= 65535:
            raise ClusterError(f"--link-mtu {mtu}: expected 576..65535")
        self.number = None
        self.names = []      # namespace = hostname of each host
        self.addresses = []  # its address
        self.bridge = None
        self.agent = None
        self._made = []      # ("netns"|"link"|"file", name), in creation order
        self._state = None

    # ---- what mpirun needs ----
    @property
    def subnet(self):
        return f"{_NET_PREFIX}.{self.number}.0/24"

    def host_list(self):
        return ",".join(f"{n}:{k}" for n, k in zip(self.names, self.host_slots))

    def mpirun_args(self):
        """Options that make mpirun start on these hosts and talk only over their links.
        No --oversubscribe: with it PRRTE maps every rank onto the first host."""
        return ["--host", self.host_list(),
                "--mca", "plm_rsh_agent", str(self.agent),
                "--mca", "btl", "tcp,self,sm",
                "--mca", "btl_tcp_if_include", self.subnet,
                "--mca", "oob_tcp_if_include", self.subnet,
                # more ranks than cores: MPI's busy polling would starve the senders
                "--mca", "mpi_yield_when_idle", "1"]

    def describe(self):
        shape = f"{self.link_rate} each way (tc tbf)" if self.link_rate else "unlimited"
        delay = f", {self.link_delay} delay (netem)" if self.delay_s else ", no added delay"
        delay += f", MTU {self.mtu or 1500}"
        slots = (f"{self.slots} slots" if len(set(self.host_slots)) == 1
                 else "+".join(map(str, self.host_slots)) + " slots")
        return (f"local cluster: {self.hosts} hosts x {slots} "
                f"({', '.join(self.names)}) on {self.subnet}; links {shape}{delay}")

    # ---- lifetime ----
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def start(self):
        if os.geteuid() != 0:
            raise ClusterError("--local-cluster needs root (it creates network namespaces, "
                               "veth links and a bridge); run it as root or under sudo")
        for tool in ("ip", "tc", "unshare"):
            if not shutil.which(tool):
                raise ClusterError(f"local cluster: {tool!r} not found (needs iproute2 and util-linux)")
        try:
            _STATE_DIR.mkdir(mode=0o700, exist_ok=True)
            with open(_STATE_DIR / "lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                sweep_stale()
                self._claim_subnet()
                self._make_bridge()  # its route marks the subnet as taken for the next one
            self._make_hosts()
            self._write_agent()
            self._check_reachable()
        except BaseException:
            self.close()
            raise

    def _claim_subnet(self):
        taken = _networks_in_use()
        names = _names_in_use()
        for n in range(1, 251):
            net = ipaddress.ip_network(f"{_NET_PREFIX}.{n}.0/24")
            if n in names or any(net.overlaps(t) for t in taken) or (_STATE_DIR / f"{n}.json").exists():
                continue
            self.number = n
            self.names = [f"hvdl{n}-h{i + 1}" for i in range(self.hosts)]
            self.addresses = [f"{_NET_PREFIX}.{n}.{i + 2}" for i in range(self.hosts)]
            self.bridge = f"hvdl{n}-br"
            self._state = _STATE_DIR / f"{n}.json"
            self._save()
            self._made.append(("file", str(self._state)))
            return
        raise ClusterError(f"local cluster: no free /24 left in {_NET_PREFIX}.0.0/16")

    def _save(self):
        self._state.write_text(json.dumps({"pid": os.getpid(), "made": self._made,
                                           "names": self.names, "bridge": self.bridge}))

    def _did(self, kind, name):
        self._made.append((kind, name))
        self._save()

    def _make_bridge(self):
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        self._did("link", self.bridge)
        _run(["ip", "addr", "add", f"{_NET_PREFIX}.{self.number}.1/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])

    def _shape(self, ns, dev):
        """tbf at the link rate on `dev` (egress), under netem for the delay if asked."""
        pre = ["ip", "netns", "exec", ns] if ns else []
        parent = ["root"]
        if self.delay_s:
            _run(pre + ["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem",
                        "delay", f"{self.delay_s * 1e6:.0f}us"],
                 what=f"--link-delay {self.link_delay}")
            parent = ["parent", "1:"]
        if self.rate_bytes:
            # The bucket: 2 ms of traffic, at least 256 KiB. Measured on this kind of VM,
            # a 128 KiB bucket halves a 1 Gbit/s link's throughput at times (the qdisc's
            # timer fires too late to refill it) and 64 KiB always does. The price: a
            # burst of up to the bucket's size leaves at once, so messages smaller than
            # it are not held to the rate (real links are stricter there). The cost model
            # (horovodlite/sim.py) is told of it.
            _run(pre + ["tc", "qdisc", "add", "dev", dev, *parent, "tbf", "rate", str(self.link_rate),
                        "burst", str(self.burst_bytes), "latency", "50ms"],
                 what=f"--link-rate {self.link_rate}")

    def _make_hosts(self):
        if self.delay_s and not netem_available():
            raise ClusterError(f"--link-delay {self.link_delay}: this kernel has no netem qdisc, so "
                               "no delay can be added to the links (tbf only shapes the rate); "
                               "leave --link-delay out")
        for i, (ns, addr) in enumerate(zip(self.names, self.addresses)):
            _run(["ip", "netns", "add", ns])
            self._did("netns", ns)
            outer = f"{ns}-o"  # hvdlN-hI-o: at most 15 characters for N, I < 1000, 100
            _run(["ip", "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns])
            self._did("link", outer)
            if self.mtu:
                _run(["ip", "link", "set", outer, "mtu", str(self.mtu)], what=f"--link-mtu {self.mtu}")
                _run(["ip", "-n", ns, "link", "set", "eth0", "mtu", str(self.mtu)],
                     what=f"--link-mtu {self.mtu}")
            _run(["ip", "link", "set", outer, "master", self.bridge, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            self._shape(None, outer)  # towards the host
            self._shape(ns, "eth0")   # from the host

    def _write_agent(self):
        """An rsh agent: mpirun calls it as `agent [options] HOST COMMAND...`, like ssh."""
        path = _STATE_DIR / f"{self.number}-agent.sh"
        hosts = " ".join(self.names)
        path.write_text(f"""#!/bin/sh
# rsh agent of horovodlite's local cluster {self.number}: runs COMMAND on simulated HOST.
while [ $# -gt 0 ] && [ "${{1#-}}" != "$1" ]; do shift; done
h="$1"; shift
case " {hosts} " in *" $h "*) ;; *) echo "local cluster {self.number}: no host $h" >&2; exit 255;; esac
exec ip netns exec "$h" unshare --uts sh -c "hostname $h && $*"
""")
        path.chmod(0o700)
        self._did("file", str(path))
        self.agent = path

    def _check_reachable(self):
        """Every host must reach mpirun's address over its link (as its daemon will)."""
        bridge_ip = f"{_NET_PREFIX}.{self.number}.1"
        with socket.socket() as srv:
            srv.bind((bridge_ip, 0))
            srv.listen(len(self.names))
            port = srv.getsockname()[1]
            probe = (f"import socket; socket.create_connection(({bridge_ip!r}, {port}), 5).close()")
            procs = [(ns, subprocess.Popen(["ip", "netns", "exec", ns, _python(), "-c", probe],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
                     for ns in self.names]
            bad = []
            for ns, p in procs:
                try:
                    if p.wait(timeout=_TIMEOUT) != 0:
                        bad.append(ns)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                    bad.append(ns)
        if bad:
            raise ClusterError(f"local cluster: host(s) {', '.join(bad)} cannot reach "
                               f"{bridge_ip} over their link")

    def close(self):
        """Removes everything this cluster made, newest first; safe to call twice."""
        for kind, name in reversed(self._made):
            _remove(kind, name)
        self._made = []


def _python():
    import sys

    return sys.executable


def _kill_namespace_processes(ns):
    """Ends what still runs in `ns` (a rank whose mpirun died): TERM, then KILL; bounded."""
    for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
        try:
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                                 timeout=_TIMEOUT).stdout
        except (OSError, subprocess.TimeoutExpired):
            return
        pids = [int(p) for p in out.split() if p.isdigit()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
            time.sleep(0.05)


def _remove(kind, name):
    if kind == "netns":
        _kill_namespace_processes(name)
        _quiet(["ip", "netns", "del", name])  # its end of the veth goes with it
    elif kind == "link":
        _quiet(["ip", "link", "del", name])
    elif kind == "file":
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass


def sweep_stale():
    """Removes clusters whose owning process is gone (it was SIGKILLed, say)."""
    if not _STATE_DIR.is_dir():
        return
    for f in _STATE_DIR.glob("*.json"):
        try:
            st = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if _pid_alive(int(st.get("pid", 0))):
            continue
        for kind, name in reversed(st.get("made", [])):
            _remove(kind, name)
        try:
            f.unlink()
        except FileNotFoundError:
            pass


def leftovers():
    """Names of hvdlN-* namespaces and links that exist now (for tests: none after close)."""
    found = []
    for cmd, pick in ((["ip", "netns", "list"], lambda w: w[0]),
                      (["ip", "-o", "link"], lambda w: w[1].rstrip(":").split("@")[0])):
        try:
            out = _run(cmd)
        except ClusterError:
            continue
        for line in out.splitlines():
            w = line.split()
            if len(w) > 1 or (w and cmd[1] == "netns"):
                name = pick(w)
                if _NAME.match(name):
                    found.append(name)
    return found
