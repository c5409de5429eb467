// crc32c.h: moved to src/common/crc32c.h (checkpoints use it too); this header forwards there so
// the pipeline's includes keep working. Thread-safe (pure functions).
#ifndef RECSDK_PIPELINE_CRC32C_H_
#define RECSDK_PIPELINE_CRC32C_H_

#include "src/common/crc32c.h"

#endif  // RECSDK_PIPELINE_CRC32C_H_
