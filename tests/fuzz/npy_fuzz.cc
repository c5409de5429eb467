// npy_fuzz.cc: libFuzzer target for the .npy reader through EmbeddingTable::ImportNpy, the public
// entry point that reads .npy files back: header parsing, shapes, dtypes, payload sizes, keys
// against values, duplicate keys and int32 key ranges. Input: a 2-byte little-endian length L,
// then L bytes of keys file and the rest as the values file. The first bit of the second byte
// picks an int64 or int32 table.
#include <memory>

#include "recsdk/table.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  using namespace recsdk;
  const size_t keys_len =
      std::min<size_t>(size - 2, size_t{data[0]} | (static_cast<size_t>(data[1] & 0x7f) << 8));
  const std::string keys = fuzz::WriteInput("keys.npy", data + 2, keys_len);
  const std::string values =
      fuzz::WriteInput("values.npy", data + 2 + keys_len, size - 2 - keys_len);
  TableConfig c;
  c.name = "fuzz";
  c.dim = 4;
  c.device_vocabulary_size = 64;
  c.key_dtype = (data[1] & 0x80) ? DType::kInt32 : DType::kInt64;
  c.padding_keys = {-1};
  auto table = EmbeddingTable::Create(c, SparseOptimizerConfig::Adagrad(0.1f));
  if (!table.ok()) std::abort();
  const Status s = (*table)->ImportNpy(keys, values);
  // On error nothing may change; on success every key holds a row.
  if (!s.ok() && (*table)->size() != 0) std::abort();
  return 0;
}
