// config_json_fuzz.cc: libFuzzer target for SessionConfig::FromJson (the session options read
// back from JSON). A config that parses must validate to a Status (never crash) and its ToJson
// must parse again.
#include <string>
#include <string_view>

#include "recsdk/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace recsdk;
  auto config =
      SessionConfig::FromJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!config.ok()) return 0;
  (void)config->Validate();
  const std::string text = config->ToJson();
  auto again = SessionConfig::FromJson(text);
  if (!again.ok()) std::abort();
  return 0;
}
