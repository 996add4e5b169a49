// Tokenisation speed (not a test, not in CI): encodes every paragraph of a text file with a
// tokenizer.json or tokenizer.model, `repeats` times on one thread, and prints MB/s and
// tokens/s. Its twin for Hugging Face's own tokenizers is
// tests/fixtures/tokenizer_json/bench.js (same arguments, same paragraphs):
//
//   build/tests/tokenizer_bench tests/fixtures/tokenizer_json/llama3.tokenizer.json
//       /usr/share/common-licenses/GPL-3 20
//   cd tests/fixtures/tokenizer_json && TOKENIZERS_PARALLELISM=false
//       node bench.js llama3.tokenizer.json /usr/share/common-licenses/GPL-3 20
// (each command on one line)
//
// (abcd caches words of up to 256 bytes per thread, as tokenizers does; the npm package's
// encode is asynchronous, so bench.js also times one encodeBatch call per repeat.)
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "engine/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_FILE TEXT_FILE [REPEATS]\n", argv[0]);
    return 2;
  }
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 10;
  absl::StatusOr<std::unique_ptr<abcd::Tokenizer>> tokenizer = abcd::Tokenizer::Load(argv[1]);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  // Paragraphs: the text cut at blank lines, as bench.js cuts it.
  const std::vector<std::string> paragraphs =
      absl::StrSplit(buffer.str(), "\n\n", absl::SkipEmpty());
  // One untimed pass: the ids' count and checksum, which bench.js prints the same way, show
  // that both encode the same paragraphs to the same ids.
  size_t pass_tokens = 0;
  uint32_t checksum = 0;
  for (const std::string& p : paragraphs) {
    absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(p);
    if (!ids.ok()) {
      std::fprintf(stderr, "%s\n", std::string(ids.status().message()).c_str());
      return 1;
    }
    pass_tokens += ids->size();
    for (int32_t id : *ids) checksum = checksum * 31u + static_cast<uint32_t>(id);
  }
  std::printf("abcd: %zu tokens per pass, ids checksum %08x\n", pass_tokens, checksum);
  size_t bytes = 0, tokens = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) {
    for (const std::string& p : paragraphs) {
      absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(p);
      if (!ids.ok()) {
        std::fprintf(stderr, "%s\n", std::string(ids.status().message()).c_str());
        return 1;
      }
      bytes += p.size();
      tokens += ids->size();
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("abcd: %zu paragraphs x %d, %.1f MB/s, %.0f tokens/s, %.3f s\n", paragraphs.size(),
              repeats, bytes / seconds / 1e6, tokens / seconds, seconds);
  return 0;
}
