// The Criteo fast path (SIMD separator scan, SWAR hex/decimal, one-block columns) against the
// reference path (src/pipeline/criteo_parse.h): same rows bit for bit, same errors (line, reason,
// message) on valid, edge-case and randomly mutated chunks, under every option that changes
// values. Also the SWAR helpers and the separator index (both ISA variants) against scalar code.
#include <algorithm>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "src/pipeline/criteo_parse.h"
#include "src/pipeline/separator_index.h"
#include "src/pipeline/text_parse.h"

namespace recsdk::internal {
namespace {

std::string Line(std::mt19937_64& rng) {
  std::string s = std::to_string(rng() % 2);
  for (int i = 0; i < 13; ++i) {
    s += '\t';
    switch (rng() % 8) {
      case 0:
        break;  // empty
      case 1:
        absl::StrAppend(&s, -static_cast<int64_t>(rng() % 1000));
        break;
      case 2:
        absl::StrAppend(&s, rng() % 100000000000ULL);  // up to 11 digits
        break;
      default:
        absl::StrAppend(&s, rng() % (i < 3 ? 50 : 70000));
    }
  }
  for (int i = 0; i < 26; ++i) {
    s += '\t';
    const int kind = static_cast<int>(rng() % 10);
    if (kind == 0) continue;  // empty
    const int digits = kind == 1 ? 1 + static_cast<int>(rng() % 16) : 8;
    for (int d = 0; d < digits; ++d) s += "0123456789abcdefABCDEF"[rng() % 22];
  }
  s += '\n';
  return s;
}

std::string Mutate(std::string s, std::mt19937_64& rng) {
  const int edits = static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !s.empty(); ++e) {
    const size_t at = rng() % s.size();
    switch (rng() % 6) {
      case 0:
        s[at] = static_cast<char>(rng());
        break;
      case 1:
        s.erase(at, 1 + rng() % 4);
        break;
      case 2:
        s.insert(at, std::string(1, "\t\n\r-+.e \xc3"[rng() % 10]));
        break;
      case 3:
        s.insert(at, "\r");
        break;
      case 4:
        s.insert(at, "1.5");
        break;
      case 5:
        s.resize(at);
        break;
    }
  }
  return s;
}

void ExpectSame(const ParsedChunk& fast, const ParsedChunk& ref, const std::string& what) {
  ASSERT_EQ(fast.lines, ref.lines) << what;
  ASSERT_EQ(fast.errors.size(), ref.errors.size()) << what;
  for (size_t i = 0; i < ref.errors.size(); ++i) {
    EXPECT_EQ(fast.errors[i].reason, ref.errors[i].reason) << what;
    EXPECT_EQ(fast.errors[i].line, ref.errors[i].line) << what;
    EXPECT_EQ(fast.errors[i].detail, ref.errors[i].detail) << what;
  }
  ASSERT_EQ(fast.batch.num_rows(), ref.batch.num_rows()) << what;
  ASSERT_EQ(fast.batch.columns().size(), ref.batch.columns().size()) << what;
  for (const auto& [name, t] : ref.batch.columns()) {
    const Tensor* f = fast.batch.column(name);
    ASSERT_NE(f, nullptr) << name;
    ASSERT_EQ(f->shape(), t.shape()) << what << " " << name;
    ASSERT_EQ(f->dtype(), t.dtype()) << name;
    ASSERT_EQ(std::memcmp(f->raw_data(), t.raw_data(), t.TotalBytes()), 0)
        << what << " column " << name;
  }
}

std::vector<CriteoOptions> AllOptions() {
  std::vector<CriteoOptions> v(4);
  v[1].dense_transform = DenseTransform::kLog1p;
  v[2].dense_transform = DenseTransform::kLog1p;
  v[2].default_dense = 3.0f;
  v[2].default_id = -7;
  v[3].id_modulus = 1000003;
  v[3].default_dense = -2.0f;
  return v;
}

TEST(CriteoFastPathTest, ValidChunksMatchReference) {
  std::mt19937_64 rng(7);
  std::string text;
  for (int r = 0; r < 3000; ++r) text += Line(rng);
  for (const CriteoOptions& o : AllOptions()) {
    const CriteoParser parser(o);
    for (bool at_eof : {false, true}) {
      ParsedChunk fast = parser.Parse(text, at_eof);
      EXPECT_TRUE(fast.errors.empty());
      EXPECT_EQ(fast.batch.num_rows(), 3000);
      ExpectSame(fast, parser.Parse(text, at_eof, CriteoParser::Path::kReference), "valid");
      ExpectSame(parser.Parse(text, at_eof, CriteoParser::Path::kSwar),
                 parser.Parse(text, at_eof, CriteoParser::Path::kReference), "valid, SWAR");
    }
  }
}

TEST(CriteoFastPathTest, MutatedChunksMatchReference) {
  std::mt19937_64 rng(11);
  const std::vector<CriteoOptions> options = AllOptions();
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    const int lines = 1 + static_cast<int>(rng() % 6);
    for (int r = 0; r < lines; ++r) text += Mutate(Line(rng), rng);
    if (rng() % 3 == 0 && !text.empty()) text.pop_back();  // unterminated last line
    const CriteoParser parser(options[iter % options.size()]);
    const bool at_eof = iter % 2 == 0;
    // The parser reads 8-byte words inside the chunk only: parse an exact-size heap copy.
    const std::unique_ptr<char[]> exact(new char[text.size() + 1]);
    std::memcpy(exact.get(), text.data(), text.size());
    const std::string_view view(exact.get(), text.size());
    const ParsedChunk reference = parser.Parse(view, at_eof, CriteoParser::Path::kReference);
    ExpectSame(parser.Parse(view, at_eof), reference, fmt::format("iteration {}", iter));
    ExpectSame(parser.Parse(view, at_eof, CriteoParser::Path::kSwar), reference,
               fmt::format("iteration {}, SWAR", iter));
    if (HasFatalFailure()) return;
  }
}

TEST(CriteoFastPathTest, EdgeLines) {
  std::string base = "1";
  for (int i = 0; i < 13; ++i) base += "\t7";
  for (int i = 0; i < 26; ++i) base += "\tff";
  const std::vector<std::string> lines = {"",
                                          "\n",
                                          "\r\n",
                                          base + "\r\n",
                                          base + "\n\n",
                                          "0.5" + base.substr(1) + "\n",
                                          "-1" + base.substr(1) + "\n",
                                          base + "\t\n",
                                          base.substr(0, base.size() - 3) + "\n",
                                          "1\t-\t" + base.substr(4) + "\n",
                                          "1\t+5\t" + base.substr(4) + "\n",
                                          "1\t123456789012\t" + base.substr(4) + "\n",
                                          base + "ffffffffffffff\n",
                                          base + "fffffffffffffff0f\n",
                                          base};
  for (const CriteoOptions& o : AllOptions()) {
    const CriteoParser parser(o);
    for (const std::string& l : lines) {
      for (bool at_eof : {false, true}) {
        const ParsedChunk reference = parser.Parse(l, at_eof, CriteoParser::Path::kReference);
        ExpectSame(parser.Parse(l, at_eof), reference, l);
        ExpectSame(parser.Parse(l, at_eof, CriteoParser::Path::kSwar), reference, l);
      }
    }
  }
}

TEST(CriteoFastPathTest, SwarHelpersMatchScalar) {
  std::mt19937_64 rng(3);
  const std::string alphabet = "0123456789abcdefABCDEFgGxz:/@`\t\n-+ \x80\xff";
  for (int iter = 0; iter < 200000; ++iter) {
    char buf[8];
    for (char& c : buf) c = alphabet[rng() % alphabet.size()];
    if (iter % 2) {
      for (char& c : buf) c = "0123456789abcdefABCDEF"[rng() % 22];
    }
    const int n = 1 + static_cast<int>(rng() % 8);
    int64_t want;
    uint64_t got;
    const bool want_ok = ParseHex(buf, buf + n, &want);
    ASSERT_EQ(ParseHex8Swar(buf, n, &got), want_ok) << std::string(buf, n);
    if (want_ok) {
      ASSERT_EQ(static_cast<int64_t>(got), want) << std::string(buf, n);
    }
    bool dec_ok = true;
    uint64_t dec = 0;
    for (int i = 0; i < n; ++i) {
      dec_ok &= buf[i] >= '0' && buf[i] <= '9';
      dec = dec * 10 + static_cast<uint64_t>(buf[i] - '0');
    }
    ASSERT_EQ(ParseDec8Swar(buf, n, &got), dec_ok) << std::string(buf, n);
    if (dec_ok) {
      ASSERT_EQ(got, dec) << std::string(buf, n);
    }
  }
}

TEST(CriteoFastPathTest, IndexFindsEverySeparator) {
  std::mt19937_64 rng(5);
  for (int iter = 0; iter < 500; ++iter) {
    std::string s(rng() % 300, 'a');
    for (char& c : s) c = "ab\t\n"[rng() % 4];
    const char* end = s.data() + s.size();
    for (size_t start = 0; start <= std::min<size_t>(s.size(), 70); start += 7) {
      std::vector<uint32_t> want;
      for (size_t i = start; i < s.size(); ++i) {
        if (s[i] == '\t' || s[i] == '\n') want.push_back(static_cast<uint32_t>(i));
      }
      for (bool baseline : {false, true}) {
        std::vector<uint32_t> got(s.size() - start + kSeparatorIndexSlack);
        const size_t n =
            baseline
                ? IndexSeparatorsBaseline(s.data(), s.data() + start, end, '\t', '\n', got.data())
                : IndexSeparators(s.data(), s.data() + start, end, '\t', '\n', got.data());
        got.resize(n);
        ASSERT_EQ(got, want) << "baseline " << baseline;
      }
      ASSERT_EQ(CountByte(s.data() + start, end, '\n'),
                static_cast<size_t>(std::count(s.begin() + start, s.end(), '\n')));
    }
  }
}

}  // namespace
}  // namespace recsdk::internal
