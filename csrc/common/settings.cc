#include "settings.h"

#include <cctype>
#include <cstdlib>
#include <stdexcept>

#include "logging.h"

namespace hvdl {

const std::array<SettingSpec, kNumSettings>& setting_specs() {
  static const std::array<SettingSpec, kNumSettings> specs = {{
#define HVDL_SETTING_SPEC(id, type, dflt, tunable, meaning) \
  {Setting::id, #id, SettingType::type, dflt, tunable, meaning},
      HVDL_SETTINGS(HVDL_SETTING_SPEC)
#undef HVDL_SETTING_SPEC
  }};
  return specs;
}

const SettingSpec& setting_spec(Setting s) { return setting_specs()[static_cast<size_t>(s)]; }

const SettingSpec* find_setting(const std::string& name) {
  for (const SettingSpec& s : setting_specs())
    if (name == s.name) return &s;
  return nullptr;
}

const char* setting_type_name(SettingType t) {
  switch (t) {
    case SettingType::INT: return "int";
    case SettingType::REAL: return "float";
    case SettingType::BOOL: return "bool";
    default: return "str";
  }
}

bool parse_setting_number(const std::string& v, double* out) {
  if (v.empty()) return false;
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (end == v.c_str()) return false;
  *out = d;
  return true;
}

namespace {
std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Booleans also take the words Horovod's users write.
bool parse_bool(const std::string& v, double* out) {
  const std::string l = lower(v);
  if (l == "true" || l == "yes" || l == "on") return *out = 1, true;
  if (l == "false" || l == "no" || l == "off") return *out = 0, true;
  return parse_setting_number(v, out);
}

bool parses(const SettingSpec& spec, const std::string& v) {
  double d;
  switch (spec.type) {
    case SettingType::INT:
    case SettingType::REAL: return parse_setting_number(v, &d);
    case SettingType::BOOL: return parse_bool(v, &d);
    default: return true;
  }
}
}  // namespace

Settings Settings::from_env() {
  Settings s;
  for (const SettingSpec& spec : setting_specs()) {
    for (const char* prefix : {"HOROVODLITE_", "HOROVOD_"}) {
      const std::string var = std::string(prefix) + spec.name;
      const char* v = std::getenv(var.c_str());
      if (!v || !*v) continue;
      if (!parses(spec, v)) {
        HVDL_LOG(WARNING) << var << "='" << v << "' is not a " << setting_type_name(spec.type)
                          << "; using the default " << spec.dflt;
        break;
      }
      s.set(spec.id, v, var);
      break;
    }
  }
  // OpenMPI's own choice of networks serves our TCP connections too, unless ours is set.
  const char* ompi = std::getenv("OMPI_MCA_btl_tcp_if_include");
  if (!s.is_set(Setting::TCP_IF_INCLUDE) && ompi && *ompi)
    s.set(Setting::TCP_IF_INCLUDE, ompi, "OMPI_MCA_btl_tcp_if_include");
  return s;
}

void Settings::set(Setting s, const std::string& value, const std::string& variable) {
  raw_[idx(s)] = value;
  var_[idx(s)] = variable.empty() ? std::string("HOROVODLITE_") + setting_spec(s).name : variable;
}

std::string Settings::variable(Setting s) const {
  return var_[idx(s)].empty() ? std::string("HOROVODLITE_") + setting_spec(s).name : var_[idx(s)];
}

const std::string& Settings::str(Setting s) const {
  static const std::array<std::string, kNumSettings> defaults = [] {
    std::array<std::string, kNumSettings> d;
    for (const SettingSpec& spec : setting_specs()) d[static_cast<size_t>(spec.id)] = spec.dflt;
    return d;
  }();
  return is_set(s) ? raw_[idx(s)] : defaults[idx(s)];
}

double Settings::real(Setting s) const {
  double d = 0;
  const SettingSpec& spec = setting_spec(s);
  const bool b = spec.type == SettingType::BOOL;
  if (is_set(s) && (b ? parse_bool(raw_[idx(s)], &d) : parse_setting_number(raw_[idx(s)], &d)))
    return d;
  if ((b ? parse_bool(spec.dflt, &d) : parse_setting_number(spec.dflt, &d))) return d;
  throw std::logic_error(std::string("setting ") + spec.name + " has no numeric default");
}

long long Settings::integer(Setting s) const { return static_cast<long long>(real(s)); }

long long Settings::integer_or(Setting s, long long auto_value) const {
  double d = 0;
  if (is_set(s) && parse_setting_number(raw_[idx(s)], &d)) return static_cast<long long>(d);
  return auto_value;
}

}  // namespace hvdl
