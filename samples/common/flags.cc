// flags.cc: the samples' flag parsing (flags.h).
#include "samples/common/flags.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "fmt/format.h"

namespace samples {

recsdk::StatusOr<int64_t> Flags::ParseInteger(const std::string& sample, const std::string& flag,
                                              const std::string& v) {
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') {
    return absl::InvalidArgumentError(
        fmt::format("{}: --{}={} is not an integer", sample, flag, v));
  }
  return static_cast<int64_t>(n);
}

void Flags::PositiveNumber(const std::string& name, double* field) {
  flags_[name] = [sample = sample_, field](const std::string& flag, const std::string& v) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(x) || x <= 0) {
      return absl::InvalidArgumentError(
          fmt::format("{}: --{}={} is not a number > 0", sample, flag, v));
    }
    *field = x;
    return recsdk::Status();
  };
}

void Flags::String(const std::string& name, std::string* field) {
  flags_[name] = [field](const std::string&, const std::string& v) {
    *field = v;
    return recsdk::Status();
  };
}

void Flags::LayerSizes(const std::string& name, std::vector<int64_t>* field) {
  flags_[name] = [sample = sample_, field](const std::string& flag, const std::string& v) {
    field->clear();
    for (size_t p = 0; p <= v.size();) {
      const size_t q = std::min(v.find(',', p), v.size());
      recsdk::StatusOr<int64_t> units = ParseInteger(sample, flag, v.substr(p, q - p));
      if (!units.ok()) return units.status();
      if (*units < 1) {
        return absl::InvalidArgumentError(fmt::format("{}: --{}={}: a layer < 1", sample, flag, v));
      }
      field->push_back(*units);
      p = q + 1;
    }
    return recsdk::Status();
  };
}

recsdk::Status Flags::Parse(int argc, char** argv) const {
  return ForEachFlag(sample_, argc, argv, [this](const std::string& name, const std::string& v) {
    const auto flag = flags_.find(name);
    if (flag == flags_.end()) return UnknownFlag(sample_, name);
    return flag->second(name, v);
  });
}

recsdk::Status ForEachFlag(
    const std::string& sample, int argc, char** argv,
    const std::function<recsdk::Status(const std::string& name, const std::string& value)>& set) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(fmt::format("{}: unexpected argument \"{}\"", sample, arg));
    }
    arg = arg.substr(2);
    std::string v;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      v = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      return absl::InvalidArgumentError(fmt::format("{}: --{} needs a value", sample, arg));
    }
    if (recsdk::Status s = set(arg, v); !s.ok()) return s;
  }
  return recsdk::Status();
}

recsdk::Status UnknownFlag(const std::string& sample, const std::string& name) {
  return absl::InvalidArgumentError(
      fmt::format("{0}: unknown flag --{1}; see samples/{0}/{0}.h for the flags", sample, name));
}

}  // namespace samples
