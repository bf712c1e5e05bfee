// The devices of a process set, and the one GPU a rank may use.
#include <atomic>
#include <stdexcept>

#include "device.h"

namespace hvdl {
Device& DeviceSet::get(int ordinal) {
  if (ordinal < 0) {
    if (!cpu_) cpu_ = make_cpu_device(t_, host_);
    return *cpu_;
  }
  auto it = gpus_.find(ordinal);
  if (it == gpus_.end()) it = gpus_.emplace(ordinal, make_cuda_device(ordinal, t_, gpu_)).first;
  return *it->second;
}

void claim_process_gpu(std::atomic<int>& slot, int ordinal, const std::string& tensor_name) {
  int expected = -1;
  if (slot.compare_exchange_strong(expected, ordinal) || expected == ordinal) return;
  throw std::invalid_argument("horovodlite: '" + tensor_name + "' is on GPU " +
                              std::to_string(ordinal) + " but this process already uses GPU " +
                              std::to_string(expected) +
                              "; use one GPU per process (e.g. torch.cuda.set_device(local_rank()))");
}

}  // namespace hvdl
