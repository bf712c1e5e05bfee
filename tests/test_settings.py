"""The one settings table (csrc/common/settings.h): the README shows exactly it, nothing
else reads the environment, and every setting is honoured under both spellings
(HOROVODLITE_<NAME> and Horovod's HOROVOD_<NAME>) when set in os.environ just before
hvd.init(). "Honoured" is checked by the effect, read back from the part that uses the
value (the worker's tunables, the shared-memory path's options, the log written during
init, files written, a call that fails without it) - and every check must also fail
with the variable unset, so a check that cannot fail is caught here too."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from mpirun import run

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _table():
    from horovodlite import settings

    return settings.table()


def test_readme_table_is_the_generated_one():
    from horovodlite import settings

    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- BEGIN SETTINGS[^>]*-->\n(.*?)\n<!-- END SETTINGS -->", text, re.S)
    assert m, "README.md lost its settings-table markers"
    assert m.group(1).strip() == settings.markdown().strip(), (
        "README's settings table differs from csrc/common/settings.h; regenerate it with "
        "`python -m horovodlite.settings`")


def test_table_is_complete_and_well_formed():
    names = [s["name"] for s in _table()]
    assert len(names) == len(set(names)) >= 38
    for s in _table():
        assert s["type"] in ("int", "float", "bool", "str") and s["meaning"], s
    tunable = {s["name"] for s in _table() if s["tunable"]}
    assert tunable == {"FUSION_THRESHOLD", "CYCLE_TIME", "RING_SEGMENT_BYTES"}


def test_nothing_else_reads_the_environment():
    """getenv only in the table's reader; no HOROVOD* environment reads in Python but the
    import-time preload switch."""
    offenders = []
    for p in list((ROOT / "csrc").rglob("*.cc")) + list((ROOT / "csrc").rglob("*.h")) + \
            list((ROOT / "cuda").rglob("*.c*")):
        if p.name != "settings.cc" and re.search(r"\bgetenv\s*\(", p.read_text()):
            offenders.append(str(p.relative_to(ROOT)))
    for p in (ROOT / "horovodlite").rglob("*.py"):
        if p.name == "_loader.py" or "bench" in p.parts or "run" in p.parts:
            continue  # the launcher and benchmarks *set* variables for the jobs they start
        if re.search(r"environ(\.get\(|\[)\s*[\"']HOROVOD", p.read_text()):
            offenders.append(str(p.relative_to(ROOT)))
    assert not offenders, f"read the environment outside the settings table: {offenders}"


# Each case: setting -> (value for this rank, check after init, optional check after
# shutdown, extra variables the case needs). A check returns True / False, or None
# where this rank has nothing to show (only rank 0 writes timelines and tunes).
CASES = r'''
import atexit, gc, json, shutil, tempfile
from horovodlite._loader import _core

TMP = tempfile.mkdtemp(prefix="hvdl-settings-")
atexit.register(shutil.rmtree, TMP, True)  # each rank's own: nothing left in /tmp

def rep(key):
    return _core.engine_report(0).get(key)

def tun(key):
    return _core.tunables(0)[key]

def output_cache_after_allgather():
    out = hvd.allgather(np.ones(1 << 18, np.float32), name="settings.ag")
    del out
    gc.collect()
    return _core.output_cache_bytes()

def dynamic_sets_work():
    try:
        ps = hvd.add_process_set([0, 1])
    except ValueError:
        return False
    hvd.remove_process_set(ps)
    return True

def file_has(path, what):
    return os.path.exists(path) and what in open(path).read()

rank0 = lambda: os.environ["OMPI_COMM_WORLD_RANK"] == "0"

# One rank per pretend host, the hierarchical path: its ring across hosts is the one
# that may run over direct TCP.
TWO_PRETEND_HOSTS = {"HOROVODLITE_HOSTNAME_OVERRIDE": f"pretend-host-{os.environ['OMPI_COMM_WORLD_RANK']}",
                     "HOROVODLITE_HIERARCHICAL_ALLREDUCE": "1",
                     "HOROVODLITE_LOG_LEVEL": "debug"}

def overlap_holds():
    """Whether a torch DistributedOptimizer holds its gradients (the rule is torch-free)
    by the setting itself (auto's choice depends on the machine's cores)."""
    from horovodlite import _overlap
    choice = _overlap.choice()
    return choice == "0" and _overlap.holds_gradients(choice, 0, 2, 1)

def one_allreduce():
    hvd.allreduce(np.ones(3), name="tl")
    return None  # what it left behind is checked after shutdown
CASES = {
    "FUSION_THRESHOLD": ("12345", lambda log: tun("fusion_threshold") == 12345),
    "CYCLE_TIME": ("3.5", lambda log: tun("cycle_time_ms") == 3.5),
    "RING_SEGMENT_BYTES": ("65536", lambda log: tun("ring_segment_bytes") == 65536),
    # Unset, two ranks of one host take riders of up to 512 KiB through the shared-memory
    # vote, and a caller runs the round of a lone tensor of up to 1 MiB (of a batch: 64 KiB).
    "CACHE_CAPACITY": ("7", lambda log: rep("cache_capacity") == "7"
                       and rep("vote_rider_bytes") == "524288"
                       and rep("caller_runs_bytes") == "65536"
                       and rep("caller_runs_lone_bytes") == "1048576"),
    # Unset, the set's thread polls ("poll"). Either way two ranks of one host ring each
    # other through the shared-memory doorbell ("shm"; across hosts: "transport", below).
    "WAKEUP": ("auto", lambda log: rep("wakeup") == "futex" and rep("rings") == "shm"),
    "BACKWARD_OVERLAP": ("0", lambda log: overlap_holds()),
    "STALL_CHECK_TIME_SECONDS": ("7", lambda log: float(rep("stall_warn_s")) == 7),
    "STALL_CHECK_DISABLE": ("1", lambda log: float(rep("stall_warn_s")) == 0),
    "STALL_SHUTDOWN_TIME_SECONDS": ("9", lambda log: float(rep("stall_fail_s")) == 9),
    "LOG_LEVEL": ("debug", lambda log: "initialised: size 2" in log and rep("log_level") == "debug"),
    "BROADCAST_CHAIN_BYTES": ("4096", lambda log: rep("broadcast_chain_from_bytes") == "4096"),
    "BROADCAST_SEGMENT_BYTES": ("8192", lambda log: rep("broadcast_chain_segment_bytes") == "8192"),
    "SHM": ("0", lambda log: _core.allreduce_algorithm(0) == "ring"),
    # Unset, two ranks of one host vote through shared memory ("shm"), with riders of
    # 512 KiB; through MPI ("transport") they take none unless asked.
    "SHM_NEGOTIATION": ("0", lambda log: rep("negotiation") == "transport"
                        and rep("vote_rider_bytes") == "0"),
    # A lone tensor's limit for callers follows the riders', but never below 64 KiB (on
    # one host 1 MiB).
    "VOTE_RIDER_BYTES": ("4096", lambda log: rep("vote_rider_bytes") == "4096"
                         and rep("caller_runs_lone_bytes") == "1048576"),
    # Unset: 64 KiB on one host (two pretend hosts: 0, below); set, it is the limit
    # for a lone tensor too.
    "CALLER_RUNS_BYTES": ("0", lambda log: rep("caller_runs_bytes") == "0"
                          and rep("caller_runs_lone_bytes") == "0"),
    "SHM_CHUNK_BYTES": ("8192", lambda log: rep("shm_chunk_bytes") == "8192"),
    "SHM_SLOTS": ("3", lambda log: rep("shm_slots") == "3"),
    "SHM_STREAM_IN_THRESHOLD": ("0", lambda log: rep("shm_stream_in_threshold") == "0"),
    "SHM_STREAM_OUT_THRESHOLD": ("4096", lambda log: rep("shm_stream_out_threshold") == "4096"),
    "SHM_RING_THRESHOLD": ("2097152", lambda log: rep("shm_ring_threshold") == "2097152"),
    "SHM_MECHANISM": ("shm_open", lambda log: rep("shm_mechanism") == "shm_open"),
    "SHM_TEST_KILL_AT_STEP": ("999999999", lambda log: rep("shm_test_kill_at_step") == "999999999"),
    "HIERARCHICAL_ALLREDUCE": ("1", lambda log: _core.allreduce_algorithm(0) == "hierarchical"),
    # Two (pretend) hosts: the wake-ups are held into the vote (unset, one host: 0),
    # and callers run their small rounds there too.
    "HOSTNAME_OVERRIDE": (lambda r: f"pretend-host-{r}",
                          lambda log: hvd.cross_size() == 2 and rep("ring_hold_us") == "50"
                          and rep("caller_runs_bytes") == "65536" and rep("rings") == "transport"),
    "OUTPUT_CACHE_BYTES": ("0", lambda log: output_cache_after_allgather() == 0),
    "TIMELINE": (lambda r: f"{TMP}/tl-{r}.json", lambda log: one_allreduce(),
                 lambda value: file_has(value, "tl") if rank0() else None),
    "TIMELINE_MARK_CYCLES": ("1", lambda log: one_allreduce(),
                             lambda value: file_has(f"{TMP}/marks.json", "CYCLE_START") if rank0() else None,
                             {"HOROVODLITE_TIMELINE": f"{TMP}/marks.json"}),
    "AUTOTUNE": ("1", lambda log: (rep("autotuner") == "on") if rank0() else None,
                 lambda value: file_has(f"{TMP}/at.csv", "fusion_threshold") if rank0() else None,
                 {"HOROVODLITE_AUTOTUNE_LOG": f"{TMP}/at.csv"}),
    "AUTOTUNE_LOG": (lambda r: f"{TMP}/log-{r}.csv", lambda log: None,
                     lambda value: file_has(value, "fusion_threshold") if rank0() else None,
                     {"HOROVODLITE_AUTOTUNE": "1"}),
    "AUTOTUNE_WARMUP_SAMPLES": ("4", lambda log: rep("autotune_warmup_samples") == "4"),
    "AUTOTUNE_STEPS_PER_SAMPLE": ("7", lambda log: rep("autotune_steps_per_sample") == "7"),
    "AUTOTUNE_SAMPLES_PER_SETTING": ("6", lambda log: rep("autotune_samples_per_setting") == "6"),
    "AUTOTUNE_CONFIRM_ROUNDS": ("5", lambda log: rep("autotune_confirm_rounds") == "5"),
    "AUTOTUNE_MIN_SAMPLE_MS": ("33", lambda log: float(rep("autotune_min_sample_ms")) == 33),
    "GPU_OPERATIONS": ("MPI", lambda log: rep("gpu_operations") == "MPI"),
    "GPU_STAGING_SEGMENT_BYTES": ("65536", lambda log: rep("gpu_staging_segment_bytes") == "65536"),
    "REDUCE_ISA": ("generic", lambda log: _core.reduce_isa() == "generic"),
    "JAX_FFI_ASYNC": ("0", lambda log: _core.jax_ffi_async() is False),
    "DYNAMIC_PROCESS_SETS": ("1", lambda log: dynamic_sets_work()),
    "PEER_TIMEOUT_SECONDS": ("17", lambda log: float(rep("peer_timeout_s")) == 17),
    "FAILURE_REPORT_DIR": (TMP + "/", lambda log: rep("failure_report_dir") == TMP + "/"),
    # Without TCP no block crosses another way: the path reports no threshold.
    "TCP_TRANSPORT": ("0", lambda log: "across hosts over MPI" in log and rep("tcp_timeout_s") is None
                      and rep("tcp_min_bytes") is None, None, TWO_PRETEND_HOSTS),
    # The TCP transport's own values, as it took them (absent without one): it chose its
    # address by the list, where pretend hosts alone would take loopback without one.
    "TCP_IF_INCLUDE": ("lo", lambda log: "across hosts over TCP" in log and
                       rep("tcp_if_include") == "lo" and rep("tcp_addresses") == "127.0.0.1",
                       None, TWO_PRETEND_HOSTS),
    "TCP_TIMEOUT_SECONDS": ("42", lambda log: "across hosts over TCP" in log and
                            float(rep("tcp_timeout_s") or "nan") == 42, None, TWO_PRETEND_HOSTS),
    "TCP_SPIN_US": ("7", lambda log: "across hosts over TCP" in log and
                    rep("tcp_spin_us") == "7", None, TWO_PRETEND_HOSTS),
    # The threshold the hierarchical path over TCP runs with, as it reports it.
    "TCP_MIN_BYTES": ("4096", lambda log: "across hosts over TCP" in log and
                      rep("tcp_min_bytes") == "4096", None, TWO_PRETEND_HOSTS),
}

def init_capturing_stderr():
    """hvd.init() with this process's fd 2 (where the core logs) in a file."""
    path = f"{TMP}/stderr-{hvd.rank() if hvd.is_initialized() else os.environ['OMPI_COMM_WORLD_RANK']}"
    saved = os.dup(2)
    with open(path, "w") as f:
        os.dup2(f.fileno(), 2)
        try:
            hvd.init()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    return open(path).read()

def main(hvd_):
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    names = [s["name"] for s in _core.settings_table()]
    for n in names:  # start from a clean environment
        for p in ("HOROVODLITE_", "HOROVOD_"):
            os.environ.pop(p + n, None)
    results = {}
    for name, case in CASES.items():
        value, check = case[0], case[1]
        after = case[2] if len(case) > 2 else None
        extra = case[3] if len(case) > 3 else {}
        value = value(rank) if callable(value) else value
        got = {}
        for prefix in ("", "HOROVODLITE_", "HOROVOD_"):  # "": unset, the control
            for p in [value, *extra.values()]:  # files a previous run wrote
                if p.startswith(TMP) and os.path.isfile(p):
                    os.remove(p)
            os.environ.update(extra)
            if prefix:
                os.environ[prefix + name] = value
            try:
                log = init_capturing_stderr()
                ok = check(log)
                hvd.shutdown()
                if after is not None:
                    a = after(value)
                    ok = a if ok is None else (ok and a) if a is not None else ok
            finally:
                for p in ("HOROVODLITE_", "HOROVOD_"):
                    os.environ.pop(p + name, None)
                for k in extra:
                    os.environ.pop(k, None)
            got[prefix or "unset"] = ok
        results[name] = got
    return results
'''

# Settings a process fixes once (the arena, NCCL's loading, the import-time preload):
# one fresh process per spelling.
PROCESS_WIDE = r'''
import json, os, sys
import horovodlite as hvd
from horovodlite import _loader, _nccl
from horovodlite._loader import _core
hvd.init()
arr = hvd.shared_empty((4,), "float32") if hasattr(hvd, "shared_empty") else None
out = {
    "SHARED_ARENA_BYTES": _core.shared_arena_info()["capacity"] == 6 << 20,
    "NCCL_LIBRARY": "/nonexistent/libnccl-settings-test.so.2" in _nccl.status()[1],
    "SKIP_MPI_PRELOAD": _loader.preloaded is None,
}
hvd.shutdown()
print(json.dumps(out))
'''
PROCESS_WIDE_VALUES = {"SHARED_ARENA_BYTES": str(5 << 20),  # rounded up to 2 MiB pages
                       "NCCL_LIBRARY": "/nonexistent/libnccl-settings-test.so.2",
                       "SKIP_MPI_PRELOAD": "1"}


# Settings the Python layer reads when it needs them, without init(): elastic training's
# (the launcher sets them) - checked in this process under each spelling.
def _elastic_cases():
    from horovodlite.elastic import hosts, world

    return {
        "ELASTIC": ("1", world.enabled),
        "ELASTIC_DISCOVERY": ("/bin/true", lambda: hosts.discovery_script() == "/bin/true"),
        "ELASTIC_DISCOVERY_INTERVAL": ("2.5", lambda: hosts._setting("DISCOVERY_INTERVAL") == 2.5),
        "ELASTIC_MIN_NP": ("3", lambda: hosts.min_np() == 3),
        "ELASTIC_MAX_NP": ("5", lambda: hosts.max_np() == 5),
        "ELASTIC_RESET_LIMIT": ("4", lambda: hosts.reset_limit() == 4),
        "ELASTIC_TIMEOUT": ("12", lambda: hosts.elastic_timeout() == 12),
        "ELASTIC_HOST_FAILURES": ("1", lambda: hosts._setting("HOST_FAILURES") == 1),
        "ELASTIC_COOLDOWN_SECONDS": ("7", lambda: hosts._setting("COOLDOWN_SECONDS") == 7),
        "ELASTIC_GROW_IN_BACKGROUND": ("0", lambda: not world.grows_in_background()),
    }


def test_elastic_settings_are_honoured_under_both_spellings(monkeypatch):
    for name, (value, check) in _elastic_cases().items():
        for p in ("HOROVODLITE_", "HOROVOD_"):
            monkeypatch.delenv(p + name, raising=False)
        assert not check(), f"{name}: the check passes without it"
        for p in ("HOROVODLITE_", "HOROVOD_"):
            monkeypatch.setenv(p + name, value)
            assert check(), (name, p)
            monkeypatch.delenv(p + name)


# Settings whose effect needs a job of its own, tested there under both spellings and
# unset: setting -> the test.
ELSEWHERE = {
    "START_TIMEOUT": "test_faults.py::test_init_with_a_rank_that_does_not_arrive_fails_after_the_start_timeout",
    # it needs several hosts with several ranks on one of them
    "HOSTS_VOTE": "test_multihost.py::test_hosts_vote_setting_under_both_spellings",
    # it needs three hosts or more (pretend ones), one rank on each; unset: test_multihost
    "VOTE_SPLIT_RIDER_BYTES": "test_split_riders.py::test_split_riders_match_numpy_and_whole_riders_bitwise",
}


def test_every_setting_is_honoured_under_both_spellings():
    # One job runs every case: init() and shutdown() per case and spelling.
    results = run(2, CASES, init=False, timeout=600)
    table = {s["name"] for s in _table()}
    covered = set(results[0]) | set(PROCESS_WIDE_VALUES) | set(_elastic_cases()) | set(ELSEWHERE)
    assert covered == table, f"settings without a test: {table - covered}; unknown: {covered - table}"
    for r, res in enumerate(results):
        for name, got in res.items():
            if got["unset"] is None and r != 0:
                continue  # nothing to show on this rank
            assert got["HOROVODLITE_"] is True, (r, name, got)
            assert got["HOROVOD_"] is True, (r, name, got)
            assert got["unset"] is False, f"rank {r}: the check of {name} passes without it: {got}"

    env_base = {k: v for k, v in os.environ.items()
                if not k.startswith(("HOROVODLITE_", "HOROVOD_"))}
    from horovodlite import _loader

    if _loader.preloaded and "/" in _loader.preloaded:  # without the preload, the linker finds it
        env_base["LD_LIBRARY_PATH"] = os.pathsep.join(
            [str(Path(_loader.preloaded).parent)] + [p for p in [env_base.get("LD_LIBRARY_PATH")] if p])
    seen = {}
    for prefix in ("", "HOROVODLITE_", "HOROVOD_"):
        env = dict(env_base, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        if prefix:
            env.update({prefix + k: v for k, v in PROCESS_WIDE_VALUES.items()})
        proc = subprocess.run([sys.executable, "-c", PROCESS_WIDE], env=env, capture_output=True,
                              text=True, timeout=300, cwd=str(ROOT))
        assert proc.returncode == 0, proc.stderr[-3000:]
        seen[prefix or "unset"] = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in PROCESS_WIDE_VALUES:
        assert seen["HOROVODLITE_"][name] and seen["HOROVOD_"][name], (name, seen)
        assert not seen["unset"][name], (name, seen)


def test_launcher_options_name_table_settings():
    """horovodlite-run's knob options set variables of the table, nothing else."""
    from horovodlite.run import launcher

    args = launcher.parse_args([
        "-np", "2", "--timeline-filename", "/tmp/t.json", "--timeline-mark-cycles",
        "--fusion-threshold-mb", "1", "--cycle-time-ms", "2", "--cache-capacity", "3",
        "--autotune", "--autotune-log-file", "/tmp/a.csv", "--log-level", "debug",
        "--stall-check-time-seconds", "4", "--stall-shutdown-time-seconds", "5", "python", "x.py"])
    env = launcher.job_env(args, base={})
    set_names = {k[len("HOROVODLITE_"):] for k in env if k.startswith("HOROVODLITE_")}
    assert len(set_names) == 10, set_names
    assert set_names <= {s["name"] for s in _table()}, set_names
