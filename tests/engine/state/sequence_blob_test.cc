// The session blob: round trip, every truncation and every single-byte change refused, version
// and magic, folded range, negative tokens, a state that is not a matching snapshot, and huge
// declared lengths refused without allocating them; Peek agrees with Decode.
#include "engine/state/sequence_blob.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/state/state_pool.h"

namespace abcd {
namespace {

// A real snapshot at position `folded` of a small model with one bounded block and one KV cache.
std::string Snapshot(int64_t folded, uint64_t fingerprint = 77) {
  StateLayout layout;
  layout.initial_fixed.assign(3, 0.25f);
  layout.kv_is_cross = {false};
  layout.kv_width = 2;
  layout.fingerprint = fingerprint;
  StatePool pool(layout, 1 << 20);
  const SequenceId id = *pool.Acquire();
  EXPECT_TRUE(pool.ReserveTokens(id, folded).ok());
  SequenceState* state = pool.Get(id);
  state->position = folded;
  state->kv[0].length = folded;
  for (int64_t row = 0; row < folded; ++row) {
    const float k[2] = {1.0f * row, -2.0f}, v[2] = {0.5f, 3.0f * row};
    state->kv[0].Write(row, 0, k, v, 2);
  }
  return *pool.Snapshot(id);
}

SequenceBlob Example() {
  SequenceBlob blob;
  blob.model = "abc-lm";
  blob.fingerprint = 77;
  blob.tokens = {1, 17, 4, 99, 0, 23};
  blob.folded = 5;
  blob.state = Snapshot(5);
  return blob;
}

// Re-seals `bytes` with a correct checksum, so that a test reaches the check behind it.
std::string Reseal(std::string bytes) {
  const uint64_t sum = SequenceBlobChecksum(absl::string_view(bytes).substr(0, bytes.size() - 8));
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  return bytes;
}

// Offsets of the example's fields.
constexpr size_t kModelLengthAt = 12, kFingerprintAt = 16 + 6, kTokenCountAt = kFingerprintAt + 8,
                 kTokensAt = kTokenCountAt + 8, kFoldedAt = kTokensAt + 6 * 4,
                 kStateLengthAt = kFoldedAt + 8;

void ExpectInvalid(absl::string_view bytes, absl::string_view what) {
  const absl::StatusOr<SequenceBlob> decoded = DecodeSequenceBlob(bytes);
  ASSERT_FALSE(decoded.ok()) << "accepted: " << what;
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << decoded.status();
  EXPECT_NE(decoded.status().message().find(what), absl::string_view::npos) << decoded.status();
  EXPECT_EQ(decoded.status().message().rfind("session blob: ", 0), 0u) << decoded.status();
}

TEST(SequenceBlob, RoundTrips) {
  const SequenceBlob blob = Example();
  const std::string bytes = EncodeSequenceBlob(blob);
  EXPECT_EQ(bytes.substr(0, 8), "ABCDSESS");
  EXPECT_EQ(bytes.size(), 8 + 4 + 4 + 6 + 8 + 8 + 6 * 4 + 8 + 8 + blob.state.size() + 8);
  auto decoded = DecodeSequenceBlob(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->model, blob.model);
  EXPECT_EQ(decoded->fingerprint, blob.fingerprint);
  EXPECT_EQ(decoded->tokens, blob.tokens);
  EXPECT_EQ(decoded->folded, blob.folded);
  EXPECT_EQ(decoded->state, blob.state);
  EXPECT_EQ(EncodeSequenceBlob(*decoded), bytes);

  auto info = PeekSequenceBlob(bytes);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->model, "abc-lm");
  EXPECT_EQ(info->fingerprint, 77u);
  EXPECT_EQ(info->tokens, 6);
  EXPECT_EQ(info->folded, 5);
  EXPECT_EQ(info->state_bytes, static_cast<int64_t>(blob.state.size()));
  EXPECT_EQ(info->total_bytes, static_cast<int64_t>(bytes.size()));

  // Edge shapes: everything folded, an empty model name, the longest one.
  SequenceBlob all = Example();
  all.folded = 0;
  all.tokens.clear();
  all.model = "";
  all.state = Snapshot(0);
  auto empty = DecodeSequenceBlob(EncodeSequenceBlob(all));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->tokens.empty());
  all.model = std::string(SequenceBlob::kMaxModelBytes, 'm');
  EXPECT_TRUE(DecodeSequenceBlob(EncodeSequenceBlob(all)).ok());
  all.model += "m";
  ExpectInvalid(EncodeSequenceBlob(all), "model name of 257 bytes");
}

TEST(SequenceBlob, EveryTruncationIsRefused) {
  const std::string bytes = EncodeSequenceBlob(Example());
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    const absl::string_view prefix = absl::string_view(bytes).substr(0, cut);
    const auto decoded = DecodeSequenceBlob(prefix);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << "cut at " << cut;
    EXPECT_FALSE(PeekSequenceBlob(prefix).ok()) << "cut at " << cut;
  }
  ExpectInvalid(bytes + "x", "checksum mismatch");
  ExpectInvalid(Reseal(bytes + std::string(8, '\0')), "trailing bytes");
  EXPECT_FALSE(PeekSequenceBlob(bytes + std::string(8, '\0')).ok());
}

TEST(SequenceBlob, EverySingleByteChangeIsRefused) {
  const std::string bytes = EncodeSequenceBlob(Example());
  for (size_t at = 0; at < bytes.size(); ++at) {
    for (const uint8_t flip : {0x01, 0x80, 0xff}) {
      std::string changed = bytes;
      changed[at] = static_cast<char>(changed[at] ^ flip);
      const absl::string_view what = at < 8    ? "bad magic"
                                     : at < 12 ? "is not supported"
                                               : "checksum mismatch";
      ExpectInvalid(changed, what);
    }
  }
}

TEST(SequenceBlob, VersionAndMagic) {
  std::string bytes = EncodeSequenceBlob(Example());
  std::string newer = bytes;
  newer[8] = 2;
  ExpectInvalid(Reseal(newer), "version 2 is not supported (this build reads 1)");
  EXPECT_FALSE(PeekSequenceBlob(newer).ok());
  std::string snapshot_not_blob = Example().state;
  ExpectInvalid(snapshot_not_blob, "bad magic");
  ExpectInvalid("", "truncated header");
  ExpectInvalid("ABCD", "truncated header");
  ExpectInvalid("ABCX", "bad magic");
}

TEST(SequenceBlob, FieldChecksBehindTheChecksum) {
  SequenceBlob blob = Example();
  blob.folded = 7;  // more than the 6 tokens
  blob.state = Snapshot(7);
  ExpectInvalid(EncodeSequenceBlob(blob), "folded 7 is outside [0, 6]");
  blob.folded = -1;
  ExpectInvalid(EncodeSequenceBlob(blob), "folded -1 is outside");
  blob = Example();
  blob.tokens[2] = -4;
  ExpectInvalid(EncodeSequenceBlob(blob), "token[2] = -4 is negative");
  blob = Example();
  blob.state = Snapshot(4);  // folded says 5
  ExpectInvalid(EncodeSequenceBlob(blob), "state position 4 differs from folded 5");
  blob = Example();
  blob.state = Snapshot(5, /*fingerprint=*/78);
  ExpectInvalid(EncodeSequenceBlob(blob), "state fingerprint 78 differs");
  blob.state = "not a snapshot at all, just some text";
  ExpectInvalid(EncodeSequenceBlob(blob), "state: snapshot: not an abcd sequence snapshot");
  EXPECT_FALSE(PeekSequenceBlob(EncodeSequenceBlob(blob)).ok());
}

// Declared lengths far beyond the buffer (with a valid checksum, so the parser itself must
// refuse them) are refused from their value alone: allocating 2^60 tokens would abort the test.
TEST(SequenceBlob, HugeDeclaredLengthsAreRefusedWithoutAllocating) {
  const std::string bytes = EncodeSequenceBlob(Example());
  auto with = [&](size_t at, uint64_t value) {
    std::string changed = bytes;
    std::memcpy(changed.data() + at, &value, 8);
    return Reseal(changed);
  };
  for (const uint64_t count : {uint64_t{1} << 60, ~uint64_t{0}, uint64_t{1} << 62}) {
    const std::string huge = with(kTokenCountAt, count);
    ExpectInvalid(huge, absl::StrCat("token count ", count, " exceeds the blob's"));
    EXPECT_EQ(PeekSequenceBlob(huge).status().code(), absl::StatusCode::kInvalidArgument);
  }
  ExpectInvalid(with(kStateLengthAt, uint64_t{1} << 61), "state length 2305843009213693952");
  ExpectInvalid(with(kStateLengthAt, 10), "trailing bytes");
  ExpectInvalid(with(kTokenCountAt, 7), "session blob: ");  // the fields after it shift
  std::string model_length = bytes;
  const uint32_t long_name = 0xffffffffu;
  std::memcpy(model_length.data() + kModelLengthAt, &long_name, 4);
  ExpectInvalid(Reseal(model_length), "model name of 4294967295 bytes");
  std::string fingerprint = with(kFingerprintAt, 78);
  ExpectInvalid(fingerprint, "state fingerprint 77 differs from the blob's 78");
}

// A blob written by another implementation of models/FORMAT.md (tests/fuzz/make_corpus.py,
// the fuzzer's seed) decodes to what that script put in.
TEST(SequenceBlob, DecodesTheFormatAsDocumented) {
  std::ifstream file(ABCD_FIXTURE_DIR "/../fuzz/corpus/session_blob_fuzzer/valid",
                     std::ios::binary);
  ASSERT_TRUE(file.good());
  std::stringstream content;
  content << file.rdbuf();
  auto blob = DecodeSequenceBlob(content.str());
  ASSERT_TRUE(blob.ok()) << blob.status();
  EXPECT_EQ(blob->model, "abc-lm");
  EXPECT_EQ(blob->fingerprint, 0xabcd5e55u);
  EXPECT_EQ(blob->tokens, (std::vector<int32_t>{1, 17, 4, 99, 5, 23, 8}));
  EXPECT_EQ(blob->folded, 5);
  auto header = StatePool::ReadSnapshotHeader(blob->state);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->position, 5);
}

}  // namespace
}  // namespace abcd
