// checkpoint_io.h: the files of a checkpoint: .npy payloads with their CRC32C, the table
// payloads of a TableSnapshot, and JSON documents (manifest.json, the `checkpoint` index) that
// carry a CRC32C of their own text. docs/checkpoint-format.md describes the layout.
//
// Every payload is checked against the manifest when read: size, CRC32C over every byte of the
// file (header included), and the header the manifest's dtype and shape imply. Reads go straight
// into the destination buffer (no staging copy).
//
// Threading: pure functions over an Env; callers serialise work on one directory.
#ifndef RECSDK_CHECKPOINT_CHECKPOINT_IO_H_
#define RECSDK_CHECKPOINT_CHECKPOINT_IO_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "recsdk/status.h"
#include "recsdk/table.h"
#include "src/common/env.h"

namespace recsdk::internal {

// Version 2 (issue 29) adds a table entry's "row_order": "storage" (a tiered table's keys and
// rows in the order its tiers store them, so a save reads the SSD files sequentially); version 1
// checkpoints (always key order) are read as before.
// Version 3 (issue 29) adds a table entry's "ssd_segments": the SSD-resident rows stay in the SSD
// tier's segment files, hard-linked into the checkpoint, and are named by slot. It is written
// only by manifests that hold such a table; the others stay version 2, so older readers keep
// reading them.
inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr int kLinkedSsdFormatVersion = 3;
inline constexpr int kNewestReadableFormatVersion = 3;
inline constexpr int kOldestReadableFormatVersion = 1;
inline constexpr char kManifestFile[] = "manifest.json";
inline constexpr char kIndexFile[] = "checkpoint";

// PayloadInfo: one payload as the manifest lists it.
struct PayloadInfo {
  std::string file;   // name inside the checkpoint directory
  std::string descr;  // "<f4", "<i8", "<i4"
  std::vector<int64_t> shape;
  uint64_t bytes = 0;   // whole file, header included
  uint32_t crc32c = 0;  // of the whole file
  nlohmann::json ToJson() const;
  static StatusOr<PayloadInfo> FromJson(const nlohmann::json& j, const std::string& where);
};

// WritePayload: writes dir/file (npy header + `data_bytes` bytes), syncs and closes it.
[[nodiscard]] StatusOr<PayloadInfo> WritePayload(Env* env, const std::string& dir,
                                                 const std::string& file, std::string_view descr,
                                                 std::vector<int64_t> shape, const void* data,
                                                 uint64_t data_bytes);
// PayloadWriter: WritePayload in pieces, for data produced while it is written (a table's rows
// streamed by SnapshotToSink). Open writes the header; Append checksums and appends; Finish
// checks that the shape's bytes all came, syncs and closes.
class PayloadWriter {
 public:
  [[nodiscard]] static StatusOr<std::unique_ptr<PayloadWriter>> Open(Env* env,
                                                                     const std::string& dir,
                                                                     const std::string& file,
                                                                     std::string_view descr,
                                                                     std::vector<int64_t> shape);
  [[nodiscard]] Status Append(const void* data, uint64_t bytes);
  [[nodiscard]] StatusOr<PayloadInfo> Finish();

 private:
  PayloadWriter() = default;
  std::unique_ptr<WritableFile> file_;
  std::string path_;
  PayloadInfo info_;
  uint64_t header_bytes_ = 0;
  uint64_t data_bytes_ = 0;  // what the shape needs
  uint64_t appended_ = 0;    // data bytes appended so far
  uint32_t crc_ = 0;
};

// ReadPayload: reads and verifies dir/info.file into `out` (resized to the payload's elements).
// DataLoss naming the file when it is missing, of another size, or fails its CRC32C; also when
// its element size is not sizeof(T).
template <typename T, typename Alloc>
[[nodiscard]] Status ReadPayload(Env* env, const std::string& dir, const PayloadInfo& info,
                                 std::vector<T, Alloc>* out);

// WriteTablePayloads: the payloads of a snapshot under `prefix` ("tables/<name>/"... flattened to
// "<prefix>keys.npy" and so on); returns the table's manifest entry.
[[nodiscard]] StatusOr<nlohmann::json> WriteTablePayloads(Env* env, const std::string& dir,
                                                          const std::string& prefix,
                                                          const TableSnapshot& snapshot);
// SnapshotAndWriteTable: WriteTablePayloads of table.SnapshotToSink(kind): the rows go from the
// table to their file through a small buffer, never copied whole. The table must be held as for
// Snapshot until this returns (a synchronous save). `snapshot`, when not null, receives the
// snapshot without its rows.
// With `link_ssd`, a full snapshot of a table with SSD-resident rows hard-links the SSD tier's
// segment files into "<prefix>ssd/" and records the rows' slots ("<prefix>ssd_slots.npy",
// "ssd_segments" in the entry) instead of copying the rows; where a link cannot be made (another
// file system, an Env that is not the default one) the rows are copied as without it. The
// caller must then call table.SettleSsdHold once the checkpoint is committed or has failed.
[[nodiscard]] StatusOr<nlohmann::json> SnapshotAndWriteTable(
    Env* env, const std::string& dir, const std::string& prefix, EmbeddingTable& table,
    EmbeddingTable::SnapshotKind kind, TableSnapshot* snapshot = nullptr, bool link_ssd = false);
// LinkedSsd: whether a table's manifest entry keeps its SSD rows in linked segments (version 3).
bool LinkedSsd(const nlohmann::json& entry);
// ReadTablePayloads: the snapshot of a manifest entry; every payload verified. Rows in storage
// order are put in key order, unless `stream_rows` and the entry is a full table: then the rows
// file is verified in pieces and left on disk, the snapshot keeps storage order and its
// row_source reads the rows (a streamed restore: memory is the keys, not the rows).
[[nodiscard]] StatusOr<TableSnapshot> ReadTablePayloads(Env* env, const std::string& dir,
                                                        const nlohmann::json& entry,
                                                        bool stream_rows = false);
// StorageOrder: whether a table's manifest entry says its keys and rows are in storage order
// ("row_order": "storage", format version 2) rather than key order; DataLoss naming `where` for
// any other value.
[[nodiscard]] StatusOr<bool> StorageOrder(const nlohmann::json& entry, const std::string& where,
                                          const std::string& table);
// CheckTableCompatible: FailedPrecondition naming the table and both values when a manifest
// entry's dim, key dtype, optimizer or slots differ from `table`'s; DataLoss when malformed.
[[nodiscard]] Status CheckTableCompatible(const nlohmann::json& entry, const EmbeddingTable& table,
                                          const std::string& manifest_path);

// WriteJsonDocument: `doc` plus "crc32c" (of the document's text without it), written
// atomically (tmp + sync + rename + directory sync) when `atomic`, else written and synced.
[[nodiscard]] Status WriteJsonDocument(Env* env, const std::string& path, nlohmann::json doc,
                                       bool atomic);
// ReadJsonDocument: the document at `path` with its "crc32c" verified and removed. NotFound when
// missing; DataLoss naming the file when it is not JSON, lacks the checksum or fails it.
[[nodiscard]] StatusOr<nlohmann::json> ReadJsonDocument(Env* env, const std::string& path);

}  // namespace recsdk::internal

#endif  // RECSDK_CHECKPOINT_CHECKPOINT_IO_H_
