// env_test.cc: the POSIX Env and the fault-injecting wrapper (src/common/env.cc): errno maps to
// status codes naming the path, atomic writes leave the old contents on a failed rename, and each
// injected fault does what tests rely on.
#include "src/common/env.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace recsdk::internal {
namespace {

std::string Dir(const std::string& leaf) {
  const char* base = std::getenv("RECSDK_TEST_TMPDIR");
  const std::string dir = std::string(base ? base : "/tmp") + "/env_test_" + leaf;
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(Env::Default()->CreateDir(dir).ok());
  return dir;
}

bool Mentions(const Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST(EnvTest, ErrnoMapsToCodesNamingThePath) {
  EXPECT_EQ(ErrnoToStatus(ENOENT, "opening", "/x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToStatus(EACCES, "opening", "/x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "writing", "/x").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EIO, "writing", "/x").code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(Mentions(ErrnoToStatus(ENOSPC, "writing", "/some/file"), "\"/some/file\""));

  Env* env = Env::Default();
  const std::string dir = Dir("errno");
  const Status missing = env->NewRandomAccessFile(dir + "/nope").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_TRUE(Mentions(missing, dir + "/nope")) << missing;
  EXPECT_EQ(env->NewWritableFile(dir + "/no/such/dir/f").status().code(),
            absl::StatusCode::kNotFound);
  if (geteuid() != 0) {  // root ignores permissions
    std::filesystem::permissions(
        dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    const Status denied = env->NewWritableFile(dir + "/f").status();
    EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied) << denied;
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  }
}

TEST(EnvTest, FilesDirectoriesAndAtomicWrites) {
  Env* env = Env::Default();
  const std::string dir = Dir("files");
  ASSERT_TRUE(env->CreateDir(dir + "/a/b/c").ok());
  ASSERT_TRUE(env->CreateDir(dir + "/a/b/c").ok());  // exists: fine
  ASSERT_TRUE(WriteStringToFileAtomic(env, dir + "/a/f", "hello").ok());
  EXPECT_EQ(*ReadFileToString(env, dir + "/a/f"), "hello");
  EXPECT_FALSE(env->FileExists(dir + "/a/f.tmp"));
  auto children = env->GetChildren(dir + "/a");
  ASSERT_TRUE(children.ok());
  EXPECT_EQ(children->size(), 2u);  // b, f
  ASSERT_TRUE(env->RenameFile(dir + "/a/f", dir + "/a/g").ok());
  EXPECT_FALSE(env->FileExists(dir + "/a/f"));
  ASSERT_TRUE(env->DeleteFile(dir + "/a/g").ok());
  EXPECT_EQ(env->DeleteFile(dir + "/a/g").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(env->DeleteDir(dir + "/a").code(), absl::StatusCode::kAlreadyExists);  // not empty
  ASSERT_TRUE(env->SyncDir(dir).ok());
}

TEST(FaultInjectionEnvTest, FailedWriteDiskFullShortReadAndFailedRename) {
  FaultInjectionEnv env(Env::Default());
  const std::string dir = Dir("faults");
  ASSERT_TRUE(WriteStringToFileAtomic(&env, dir + "/f", "old contents").ok());

  env.fail_write_after = 1;  // the second Append fails
  auto f = *env.NewWritableFile(dir + "/g");
  EXPECT_TRUE(f->Append("one").ok());
  const Status failed = f->Append("two");
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal) << failed;
  EXPECT_TRUE(Mentions(failed, dir + "/g")) << failed;
  EXPECT_TRUE(f->Append("three").ok());  // only that one
  ASSERT_TRUE(f->Close().ok());

  env.disk_full_after_bytes = 10;
  const Status full = WriteStringToFileAtomic(&env, dir + "/f", "new contents, longer than 10");
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_EQ(*ReadFileToString(&env, dir + "/f"), "old contents");
  EXPECT_FALSE(env.FileExists(dir + "/f.tmp"));
  env.disk_full_after_bytes = -1;

  // A crash between write and rename, as the files show it: the old contents stay.
  env.fail_rename = true;
  EXPECT_FALSE(WriteStringToFileAtomic(&env, dir + "/f", "new").ok());
  EXPECT_EQ(*ReadFileToString(&env, dir + "/f"), "old contents");
  env.fail_rename = false;

  // Short reads are only short: ReadFileToString still gets everything.
  env.short_read_bytes = 3;
  auto r = *env.NewRandomAccessFile(dir + "/f");
  char buf[16];
  EXPECT_EQ(*r->Read(0, sizeof(buf), buf), 3u);
  EXPECT_EQ(*ReadFileToString(&env, dir + "/f"), "old contents");
}

// A short write: the bytes that fit reach the file (a torn tail), the Append fails naming the
// file, and so does every Append after it; an atomic write over it keeps the previous file.
TEST(FaultInjectionEnvTest, ShortWriteLeavesATornTailAndFails) {
  FaultInjectionEnv env(Env::Default());
  const std::string dir = Dir("short_write");
  env.short_write_after_bytes = 5;
  auto f = *env.NewWritableFile(dir + "/g");
  EXPECT_TRUE(f->Append("abc").ok());
  const Status torn = f->Append("defgh");
  EXPECT_EQ(torn.code(), absl::StatusCode::kResourceExhausted) << torn;
  EXPECT_TRUE(Mentions(torn, dir + "/g")) << torn;
  EXPECT_TRUE(Mentions(torn, "2 of 5 bytes")) << torn;
  EXPECT_FALSE(f->Append("i").ok());
  ASSERT_TRUE(f->Close().ok());
  EXPECT_EQ(*ReadFileToString(&env, dir + "/g"), "abcde");

  env.short_write_after_bytes = -1;
  ASSERT_TRUE(WriteStringToFileAtomic(&env, dir + "/f", "old contents").ok());
  env.short_write_after_bytes = 4;
  EXPECT_EQ(WriteStringToFileAtomic(&env, dir + "/f", "new contents").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*ReadFileToString(&env, dir + "/f"), "old contents");
  EXPECT_FALSE(env.FileExists(dir + "/f.tmp"));
}

// Issue 28 item 4 / issue 30: every writer that keeps a file (checkpoint documents, npy export,
// profiler traces, kernel_meta dumps) writes through WritePiecesToFileAtomic: a failed sync
// leaves the previous file, and neither a link at the name nor one at the temporary is followed.
TEST(FaultInjectionEnvTest, AtomicWritesSurviveAFailedSyncAndNeverFollowLinks) {
  FaultInjectionEnv env(Env::Default());
  const std::string dir = Dir("sync_links");
  ASSERT_TRUE(WritePiecesToFileAtomic(&env, dir + "/f", {"old ", "contents"}).ok());
  EXPECT_EQ(*ReadFileToString(&env, dir + "/f"), "old contents");
  env.fail_sync = true;
  const Status failed = WritePiecesToFileAtomic(&env, dir + "/f", {"new"});
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal) << failed;
  EXPECT_TRUE(Mentions(failed, dir + "/f.tmp")) << failed;
  EXPECT_EQ(*ReadFileToString(&env, dir + "/f"), "old contents");
  EXPECT_FALSE(env.FileExists(dir + "/f.tmp"));
  env.fail_sync = false;

  ASSERT_TRUE(WriteStringToFileAtomic(&env, dir + "/victim", "precious").ok());
  std::filesystem::create_symlink(dir + "/victim", dir + "/g.tmp");
  ASSERT_TRUE(WriteStringToFileAtomic(&env, dir + "/g", "mine").ok());
  EXPECT_EQ(*ReadFileToString(&env, dir + "/victim"), "precious");
  EXPECT_EQ(*ReadFileToString(&env, dir + "/g"), "mine");
  // A link at the final name is replaced by the rename, its target untouched.
  std::filesystem::create_symlink(dir + "/victim", dir + "/h");
  ASSERT_TRUE(WriteStringToFileAtomic(&env, dir + "/h", "mine").ok());
  EXPECT_EQ(*ReadFileToString(&env, dir + "/victim"), "precious");
  EXPECT_EQ(*env.GetFileType(dir + "/h"), FileType::kRegular);
  // A plain writable file refuses a link (O_NOFOLLOW).
  std::filesystem::create_symlink(dir + "/victim", dir + "/k");
  EXPECT_EQ(env.NewWritableFile(dir + "/k").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ReadFileToString(&env, dir + "/victim"), "precious");
  // DeleteRecursively removes a link to a directory, not the directory's files.
  ASSERT_TRUE(env.CreateDir(dir + "/d").ok());
  ASSERT_TRUE(WriteStringToFileAtomic(&env, dir + "/d/x", "kept").ok());
  std::filesystem::create_directory_symlink(dir + "/d", dir + "/link");
  ASSERT_TRUE(DeleteRecursively(&env, dir + "/link").ok());
  EXPECT_EQ(*ReadFileToString(&env, dir + "/d/x"), "kept");
  EXPECT_FALSE(env.GetFileType(dir + "/link").ok());
}

}  // namespace
}  // namespace recsdk::internal
