// Settings come from HOROVODLITE_<NAME>, falling back to HOROVOD_<NAME> so existing
// Horovod job scripts keep working unchanged.
#pragma once
#include <cstdlib>
#include <string>

namespace hvdl {

inline const char* env_raw(const char* name) {
  std::string a = std::string("HOROVODLITE_") + name;
  if (const char* v = std::getenv(a.c_str())) return v;
  std::string b = std::string("HOROVOD_") + name;
  return std::getenv(b.c_str());
}

inline bool env_is_set(const char* name) {
  const char* v = env_raw(name);
  return v != nullptr && *v != '\0';
}

inline double env_double(const char* name, double dflt) {
  const char* v = env_raw(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  return end == v ? dflt : d;
}

inline long long env_int(const char* name, long long dflt) {
  return static_cast<long long>(env_double(name, static_cast<double>(dflt)));
}

inline std::string env_str(const char* name, const std::string& dflt = "") {
  const char* v = env_raw(name);
  return (v && *v) ? std::string(v) : dflt;
}

}  // namespace hvdl
