// fuzz_dump.h: the small dump dump_fuzz reads back and fuzz_make_seeds seeds it from: one step of
// z = Log(x * three), x fed [2] = {-1, 2} (so z holds a NaN and find-nan's verdict path runs),
// and d = relu(reshape(x, [1, 2]) w + b), dumped with dump_mode "all". With `fused` (the default)
// the fuse_dense pass makes d one FusedDense, so the manifest holds a "fused_from" list and the
// fused op's attributes; unfused, the same graph is the other side of compare-dumps' pairing of a
// fused op with the chain it replaced. WriteFuzzDump returns the step directory; the harness, not
// the input, is broken when it fails, so it aborts. Threading: single-threaded harness code.
#ifndef RECSDK_TESTS_FUZZ_FUZZ_DUMP_H_
#define RECSDK_TESTS_FUZZ_FUZZ_DUMP_H_

#include <cstdlib>
#include <filesystem>
#include <string>

#include "recsdk/recsdk.h"
#include "src/common/env.h"
#include "src/precision/dump_reader.h"

namespace recsdk::fuzz {

inline std::string WriteFuzzDump(const std::string& root, bool fused = true) {
  std::filesystem::remove_all(root);
  Graph g;
  Scope s(&g);
  Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{2});
  Output y = ops::Mul(s.WithOpName("y"), x, ops::Const(s.WithOpName("three"), 3.0f));
  Output z = ops::Log(s.WithOpName("scope/z"), y);
  auto w = Tensor::FromValues<float>(Shape{2, 2}, {1.0f, -1.0f, 0.5f, 2.0f});
  auto b = Tensor::FromValues<float>(Shape{2}, {0.25f, -0.5f});
  if (!w.ok() || !b.ok()) std::abort();
  Output mm = ops::MatMul(s.WithOpName("dense/mm"), ops::Reshape(s, x, {1, 2}),
                          ops::Const(s.WithOpName("w"), *w));
  Output d = ops::Relu(s.WithOpName("dense/relu"), ops::BiasAdd(s.WithOpName("dense/ba"), mm,
                                                                ops::Const(s.WithOpName("b"), *b)));
  if (!s.ok()) std::abort();
  SessionConfig c;
  c.enable_dump = true;
  c.dump_path = root;
  c.dump_mode = "all";
  if (fused) c.enable_scope_fusion_passes = "fuse_dense";
  auto session = Session::Create(g, c);
  if (!session.ok()) std::abort();
  auto feed = Tensor::FromValues<float>(Shape{2}, {-1.0f, 2.0f});
  if (!feed.ok() || !(*session)->Run({{x, *feed}}, {z, d}).ok()) std::abort();
  auto dirs = internal::FindStepDirs(internal::Env::Default(), root);
  if (!dirs.ok() || dirs->size() != 1) std::abort();
  return (*dirs)[0];
}

}  // namespace recsdk::fuzz

#endif  // RECSDK_TESTS_FUZZ_FUZZ_DUMP_H_
