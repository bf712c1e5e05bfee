# The standard headers nearly every source under csrc/ includes, parsed once per target
# instead of once per source: the core's build (and the C++ tests' build) took a fifth to
# a quarter less time on 2 cores. The core module and tests/cpp both use this list.
set(HVDL_PRECOMPILED_HEADERS <vector> <string> <algorithm> <memory> <chrono> <atomic>
    <mutex> <map> <thread> <sstream> <functional> <condition_variable> <unordered_map>
    <stdexcept> <cstring>)
