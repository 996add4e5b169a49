// The safetensors loader against valid, truncated and malicious files. Built with ASan and
// UBSan: every bad file must give a Status naming the problem, never a crash or overread.
#include "engine/model/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "engine/model/weights.h"

namespace abcd {
namespace {

std::string Header(const std::string& json) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& bytes) {
    const std::string path = ::testing::TempDir() + "/st_" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                             std::to_string(counter_++) + ".safetensors";
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  absl::Status OpenStatus(const std::string& bytes) {
    return SafetensorsFile::Open(Write(bytes)).status();
  }
  void ExpectError(const std::string& bytes, const std::string& fragment) {
    const absl::Status status = OpenStatus(bytes);
    EXPECT_FALSE(status.ok());
    EXPECT_NE(std::string(status.message()).find(fragment), std::string::npos) << status;
  }
  int counter_ = 0;
};

std::string TwoFloats() {
  std::string data(8, '\0');
  const float values[2] = {1.5f, -2.0f};
  std::memcpy(data.data(), values, 8);
  return data;
}

TEST_F(SafetensorsTest, ReadsValidFile) {
  const std::string file = Header(R"({"__metadata__":{"format":"pt"},)"
                                  R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}})") +
                           TwoFloats() + std::string("\xc0\x3f\x00\xc0", 4);
  auto st = SafetensorsFile::Open(Write(file));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ((*st)->metadata().at("format"), "pt");
  auto a = (*st)->Get("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*ToFloat32(**a), (std::vector<float>{1.5f, -2.0f}));
  auto b = (*st)->Get("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*ToFloat32(**b), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ((*st)->Get("c").status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string((*st)->Get("c").status().message()).find("\"c\""), std::string::npos);
}

TEST_F(SafetensorsTest, DecodesHalfPrecision) {
  // 1.0, -2.5, 65504 (max), 2^-24 (smallest subnormal)
  const std::string data("\x00\x3c\x00\xc1\xff\x7b\x01\x00", 8);
  auto st = SafetensorsFile::Open(
      Write(Header(R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})") + data));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*ToFloat32(**(*st)->Get("h")),
            (std::vector<float>{1.0f, -2.5f, 65504.0f, 5.9604644775390625e-8f}));
}

TEST_F(SafetensorsTest, RejectsTruncatedAndBadHeaders) {
  ExpectError("", "truncated");
  ExpectError("abc", "truncated");
  std::string huge(8, '\0');
  huge[0] = '\x10';
  huge[5] = '\x01';
  ExpectError(huge + "{}", "exceeds the file size");
  ExpectError(Header("{\"a\": "), "not a JSON object");
  ExpectError(Header("[1,2]"), "not a JSON object");
  const std::string valid = Header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})");
  ExpectError(valid + "1234", "out of range");  // data cut short
}

TEST_F(SafetensorsTest, RejectsBadEntries) {
  const std::string data = TwoFloats() + TwoFloats();
  ExpectError(Header(R"({"a":{"dtype":"F8","shape":[2],"data_offsets":[0,8]}})") + data,
              "unsupported dtype");
  ExpectError(Header(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})") + data, "shape");
  ExpectError(Header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})") + data,
              "need 12");
  ExpectError(Header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})") + data,
              "data_offsets");
  ExpectError(Header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,800]}})") + data,
              "out of range");
  ExpectError(Header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})") + data,
              "data_offsets");
  ExpectError(Header(R"({"a":{"shape":[2],"data_offsets":[0,8]}})") + data, "missing dtype");
  ExpectError(
      Header(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})") +
          data,
      "overflows");
  ExpectError(Header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})") +
                  data,
              "overlap");
  ExpectError(Header(R"({"__metadata__":{"x":1}})"), "__metadata__");
}

TEST_F(SafetensorsTest, WeightLoaderChecksShapesAndLeftovers) {
  const std::string file = Header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]}})") +
                           TwoFloats() + TwoFloats();
  auto st = SafetensorsFile::Open(Write(file));
  ASSERT_TRUE(st.ok());
  WeightLoader loader(**st);
  auto misshaped = loader.Load("a", {1, 2});
  EXPECT_EQ(misshaped.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(
      std::string(misshaped.status().message()).find("\"a\" has shape [2], config needs [1, 2]"),
      std::string::npos)
      << misshaped.status();
  EXPECT_EQ(loader.Load("missing", {2}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(loader.Load("a", {2}).ok());
  auto integer = loader.Load("b", {2});
  EXPECT_EQ(integer.status().code(), absl::StatusCode::kInvalidArgument);
  const absl::Status leftovers = loader.CheckAllUsed();
  EXPECT_NE(std::string(leftovers.message()).find("b"), std::string::npos);
}

// Issue 19 item 14: UBSan flagged memcpy(nullptr, src, 0) when decoding an empty tensor (this
// binary runs with -fno-sanitize-recover, so the old code aborts here).
TEST_F(SafetensorsTest, DecodesZeroElementTensors) {
  const std::string file = Header(R"({"f":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},)"
                                  R"("h":{"dtype":"F16","shape":[0],"data_offsets":[0,0]},)"
                                  R"("i":{"dtype":"I32","shape":[3,0],"data_offsets":[0,0]},)"
                                  R"("l":{"dtype":"I64","shape":[0],"data_offsets":[0,0]}})");
  auto st = SafetensorsFile::Open(Write(file));
  ASSERT_TRUE(st.ok()) << st.status();
  for (const char* name : {"f", "h"}) {
    absl::StatusOr<std::vector<float>> values = ToFloat32(**(*st)->Get(name));
    ASSERT_TRUE(values.ok()) << name << ": " << values.status();
    EXPECT_TRUE(values->empty()) << name;
  }
  for (const char* name : {"i", "l"}) {
    absl::StatusOr<std::vector<int32_t>> values = ToInt32(**(*st)->Get(name));
    ASSERT_TRUE(values.ok()) << name << ": " << values.status();
    EXPECT_TRUE(values->empty()) << name;
  }
  WeightLoader loader(**st);
  absl::StatusOr<std::vector<float>> loaded = loader.Load("f", {0, 4});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->empty());
}

// Issue 19 item 17: NaN / infinite weights load (the numbers are the checkpoint's) but are
// reported per tensor, so the server can warn.
TEST_F(SafetensorsTest, WeightLoaderReportsNonFiniteTensors) {
  const float values[4] = {1.0f, std::nanf(""), -INFINITY, 2.0f};
  std::string data(reinterpret_cast<const char*>(values), sizeof(values));
  const std::string file = Header(R"({"bad":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("worse":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})") +
                           data;
  auto st = SafetensorsFile::Open(Write(file));
  ASSERT_TRUE(st.ok()) << st.status();
  WeightLoader loader(**st);
  ASSERT_TRUE(loader.Load("bad", {2}).ok());
  ASSERT_TRUE(loader.Load("worse", {2}).ok());
  const std::vector<std::pair<std::string, int64_t>> expected = {{"bad", 1}, {"worse", 1}};
  EXPECT_EQ(loader.non_finite(), expected);
}

// The in-memory entry (used by the fuzzer) applies the same checks as Open.
TEST_F(SafetensorsTest, FromBytesChecksLikeOpen) {
  auto bytes = [](const std::string& s) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(s.data()), s.size());
  };
  const std::string valid =
      Header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})") + TwoFloats();
  auto st = SafetensorsFile::FromBytes(bytes(valid), "mem");
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(*ToFloat32(**(*st)->Get("a")), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ((*st)->path(), "mem");
  const absl::Status cut = SafetensorsFile::FromBytes(bytes(valid.substr(0, 20)), "mem").status();
  EXPECT_EQ(cut.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(cut.message()).find("mem: header length"), std::string::npos) << cut;
  EXPECT_FALSE(SafetensorsFile::FromBytes({}, "mem").ok());
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  EXPECT_EQ(SafetensorsFile::Open("/nonexistent/model.safetensors").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace abcd
