#include "fault_injection.h"

#include <signal.h>

namespace hvdl {

uint64_t test_kill_step(const Settings& s) {
  return static_cast<uint64_t>(s.integer(Setting::SHM_TEST_KILL_AT_STEP));
}

void install_test_faults(ShmCollectives& shm, const Settings& s) {
  const uint64_t kill_at = test_kill_step(s);
  if (kill_at == 0) return;
  shm.set_step_hook([kill_at](uint64_t step) {
    if (step == kill_at) raise(SIGKILL);
  });
}

}  // namespace hvdl
