// HfTokenizer::Encode (engine/tokenizer/hf_tokenizer.h) hands each pre-token to the BPE model as
// the pre-tokenizer finds it, through buffers reused from one to the next: the number of heap
// allocations of one call does not grow with the number of pre-tokens (once the word cache holds
// the text's words; words over its 256 bytes are merged anew each time, in the same buffers).
// Counted with a replacement global operator new that counts on the calling thread only while a
// test asks it to; it allocates with malloc as the default one does, for every test of this
// binary.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "engine/tokenizer/hf_tokenizer.h"

namespace {

thread_local bool encode_alloc_counting = false;
thread_local int64_t encode_alloc_count = 0;

}  // namespace

void* operator new(std::size_t size) {
  if (encode_alloc_counting) ++encode_alloc_count;
  if (void* p = std::malloc(size == 0 ? 1 : size); p != nullptr) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace abcd {
namespace {

const std::string kEncodeAllocFixtures = std::string(ABCD_FIXTURE_DIR) + "/tokenizer_json/";

// The heap allocations of one Encode of `text` on this thread, and its ids.
int64_t EncodeAllocations(const hf::HfTokenizer& tokenizer, const std::string& text,
                          std::vector<int32_t>* ids) {
  encode_alloc_count = 0;
  encode_alloc_counting = true;
  absl::StatusOr<std::vector<int32_t>> encoded = tokenizer.Encode(text);
  encode_alloc_counting = false;
  EXPECT_TRUE(encoded.ok()) << encoded.status();
  if (encoded.ok()) *ids = *std::move(encoded);
  return encode_alloc_count;
}

// `repeats` times a line of words (one over the 16 bytes a string holds without the heap),
// digits, punctuation, a run of spaces and a 300-letter word (past the word cache).
std::string EncodeAllocText(int repeats) {
  const std::string unit = "The quick brown fox's internationalization of 12345 jumps, over   it " +
                           std::string(300, 'a') + "\n";
  std::string text;
  for (int i = 0; i < repeats; ++i) text += unit;
  return text;
}

// 16 times the text (about 3,800 more pre-tokens, 240 of them 300 letters) costs only the growth
// of the buffers that double as they fill (the ids; a normalized text, its matches, and the
// merge queue of llama2's whole-text word): about 4 more allocations each, nothing per
// pre-token. Before the pre-tokens streamed, each over 15 bytes cost two strings, each uncached
// word its merge buffers too: thousands more.
TEST(HfEncodeAllocations, DoNotGrowWithThePreTokens) {
  for (const char* fixture : {"llama3", "qwen2", "llama2", "gpt2", "metaspace_split"}) {
    SCOPED_TRACE(fixture);
    absl::StatusOr<std::unique_ptr<hf::HfTokenizer>> tokenizer =
        hf::HfTokenizer::Load(kEncodeAllocFixtures + fixture + ".tokenizer.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    std::vector<int32_t> small_ids, large_ids;
    EncodeAllocations(**tokenizer, EncodeAllocText(2), &small_ids);  // fills the word cache
    const int64_t small = EncodeAllocations(**tokenizer, EncodeAllocText(16), &small_ids);
    const int64_t large = EncodeAllocations(**tokenizer, EncodeAllocText(256), &large_ids);
    ASSERT_GT(large_ids.size(), small_ids.size() * 15);
    std::cout << fixture << ": " << small << " allocations for 16 lines, " << large << " for 256\n";
    EXPECT_LE(large, small + 32);
  }
}

}  // namespace
}  // namespace abcd
