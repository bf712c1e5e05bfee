// Test-only faults, kept out of the collectives: the settings that ask for them
// install hooks the production path only calls when present.
//   SHM_TEST_KILL_AT_STEP=k: this process kills itself (SIGKILL) right after
//   publishing shared-memory pipeline step k, i.e. in the middle of a collective, so
//   tests see how the other ranks notice a peer that dies there.
#pragma once
#include "../collectives/shm_allreduce.h"
#include "../common/settings.h"

namespace hvdl {

void install_test_faults(ShmCollectives& shm, const Settings& s);
// The kill step installed on `shm`'s hooks by this process (0: none), for reports.
uint64_t test_kill_step(const Settings& s);

}  // namespace hvdl
