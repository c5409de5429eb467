// summary_writer_test.cc: SummaryWriter's event files decode with the real protobuf library
// (Debian's python3-protobuf) against TensorFlow's published Event / Summary layout, and their
// TFRecord framing carries valid masked CRC32Cs. Skips, saying why, when python3-protobuf is
// missing (scripts/install_deps.sh installs it).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "recsdk/summary.h"
#include "src/common/env.h"

namespace recsdk {
namespace {

// The decoder: the message definitions of tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto that the writer uses, built with descriptor_pb2; every
// record's length and data CRC are checked; one line per event is printed.
constexpr char kDecoder[] = R"PY(
import struct, sys
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
F = descriptor_pb2.FieldDescriptorProto
fd = descriptor_pb2.FileDescriptorProto(name="event_subset.proto", package="tensorflow", syntax="proto3")
def msg(name, fields):
    m = fd.message_type.add(name=name)
    for (fname, num, ftype, label, tname) in fields:
        f = m.field.add(name=fname, number=num, type=ftype, label=label)
        if tname: f.type_name = tname
    return m
OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED
msg("SummaryValue", [("node_name", 7, F.TYPE_STRING, OPT, None), ("tag", 1, F.TYPE_STRING, OPT, None),
                     ("simple_value", 2, F.TYPE_FLOAT, OPT, None)])
msg("Summary", [("value", 1, F.TYPE_MESSAGE, REP, ".tensorflow.SummaryValue")])
msg("Event", [("wall_time", 1, F.TYPE_DOUBLE, OPT, None), ("step", 2, F.TYPE_INT64, OPT, None),
              ("file_version", 3, F.TYPE_STRING, OPT, None), ("graph_def", 4, F.TYPE_BYTES, OPT, None),
              ("summary", 5, F.TYPE_MESSAGE, OPT, ".tensorflow.Summary")])
pool = descriptor_pool.DescriptorPool()
pool.Add(fd)
desc = pool.FindMessageTypeByName("tensorflow.Event")
try:
    Event = message_factory.GetMessageClass(desc)
except AttributeError:
    Event = message_factory.MessageFactory(pool).GetPrototype(desc)
table = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    table.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = table[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
def masked(b):
    c = crc32c(b)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xa282ead8) & 0xFFFFFFFF
data = open(sys.argv[1], "rb").read()
pos = 0
while pos < len(data):
    header = data[pos:pos + 8]
    (length,) = struct.unpack("<Q", header)
    (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
    assert length_crc == masked(header), "bad length crc at %d" % pos
    body = data[pos + 12:pos + 12 + length]
    (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
    assert body_crc == masked(body), "bad data crc at %d" % pos
    pos += 16 + length
    e = Event()
    e.ParseFromString(body)
    assert e.wall_time > 1.5e9, e.wall_time
    if e.file_version:
        print("version", e.file_version)
    for v in e.summary.value:
        print("scalar", e.step, v.tag, "%.6g" % v.simple_value)
)PY";

std::string TempDir() {
  const char* base = std::getenv("RECSDK_TEST_TMPDIR");
  std::string dir = std::string(base ? base : "/tmp") + "/summary_writer_test";
  std::filesystem::remove_all(dir);
  return dir;
}

bool HavePythonProtobuf() {
  return std::system("/usr/bin/python3 -c 'import google.protobuf' >/dev/null 2>&1") == 0;
}

std::string Decode(const std::string& dir, const std::string& event_file) {
  const std::string script = dir + "/decode.py";
  std::ofstream(script) << kDecoder;
  const std::string command = "/usr/bin/python3 " + script + " " + event_file + " 2>&1";
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
  const int rc = pclose(pipe);
  if (rc != 0) out += "exit status " + std::to_string(rc);
  return out;
}

TEST(SummaryWriterTest, EventsDecodeWithRealProtobuf) {
  if (!HavePythonProtobuf()) {
    GTEST_SKIP() << "python3-protobuf is missing (apt-get install python3-protobuf, or run "
                    "scripts/install_deps.sh); the event-file decoding check did not run";
  }
  const std::string dir = TempDir();
  auto writer = SummaryWriter::Create(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::string name = std::filesystem::path((*writer)->path()).filename();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  ASSERT_TRUE((*writer)->AddScalar("loss", 0.6931, 1).ok());
  ASSERT_TRUE((*writer)->AddScalar("eval/auc_0", 0.75, 100).ok());
  ASSERT_TRUE((*writer)->AddScalar("global_step/sec", 1234.5, 1LL << 40).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_EQ(Decode(dir, (*writer)->path()),
            "version brain.Event:2\n"
            "scalar 1 loss 0.6931\n"
            "scalar 100 eval/auc_0 0.75\n"
            "scalar 1099511627776 global_step/sec 1234.5\n");
}

TEST(SummaryWriterTest, SecondWriterDoesNotOverwriteAndErrorsNameThePath) {
  const std::string dir = TempDir();
  auto a = SummaryWriter::Create(dir);
  auto b = SummaryWriter::Create(dir);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  EXPECT_EQ((*a)->AddScalar("", 1, 1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*a)->Close().ok());
  ASSERT_TRUE((*a)->Close().ok());
  EXPECT_EQ((*a)->AddScalar("x", 1, 1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(SummaryWriter::Create("").ok());
  auto bad = SummaryWriter::Create((*b)->path() + "/sub");  // a file is in the way
  EXPECT_FALSE(bad.ok());
}

TEST(SummaryWriterTest, WritesGoThroughTheEnv) {
  // A failed write and a full disk come back from Flush (and Close) as the Env's errors, naming
  // the event file; nothing is written behind the Env's back.
  const std::string dir = TempDir();
  internal::FaultInjectionEnv env(internal::Env::Default());
  auto writer = SummaryWriter::Create(dir, &env);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddScalar("loss", 1, 1).ok());
  const auto before = std::filesystem::file_size((*writer)->path());
  env.fail_write_after = 0;
  Status failed = (*writer)->Flush();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal) << failed;
  EXPECT_NE(failed.message().find((*writer)->path()), std::string::npos) << failed;
  EXPECT_EQ(std::filesystem::file_size((*writer)->path()), before);
  env.disk_full_after_bytes = 0;
  ASSERT_TRUE((*writer)->AddScalar("loss", 2, 2).ok());
  EXPECT_EQ((*writer)->Close().code(), absl::StatusCode::kResourceExhausted);
  // A healthy Env: the writer's bytes arrive through it.
  env.disk_full_after_bytes = -1;
  auto ok = SummaryWriter::Create(dir, &env);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_NE((*ok)->path(), (*writer)->path());
  ASSERT_TRUE((*ok)->AddScalar("loss", 3, 3).ok());
  ASSERT_TRUE((*ok)->Flush().ok());
  EXPECT_GT(std::filesystem::file_size((*ok)->path()), before);
}

}  // namespace
}  // namespace recsdk
