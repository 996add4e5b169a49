// libsentencepiece behind a plugin boundary.
//
// Debian's libsentencepiece bundles its own copy of protobuf-lite and exports those symbols,
// which collide with libprotobuf (needed by gRPC) in one process: whichever loads first serves
// both, and the server crashes during static initialisation. So the SentencePiece calls live in
// a small plugin (libabcd_sentencepiece.so, sentencepiece_plugin.cc) that is dlopen()ed with
// RTLD_LOCAL | RTLD_DEEPBIND: its protobuf symbols stay private to it (sanitizer builds, where
// ASan refuses RTLD_DEEPBIND, link a DF_SYMBOLIC copy of the library instead; see
// symbolic_copy.py). The interface is a
// virtual class of standard-library types, so no symbol is looked up across the boundary except
// the one factory function.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace abcd {

class SentencePieceBackend {
 public:
  virtual ~SentencePieceBackend() = default;
  // Each returns an empty string on success, else the library's error message.
  virtual std::string Load(const std::string& path) = 0;
  virtual std::string Encode(const std::string& text, std::vector<int>* ids) const = 0;
  virtual std::string Decode(const std::vector<int>& ids, std::string* text) const = 0;
  virtual int PieceCount() const = 0;
  // The piece of `id` as stored in the model ("<U+2581>the", "<0x7B>") and its kind.
  enum PieceKind : int { kNormal = 0, kByte = 1, kControl = 2 };  // kControl: also unknown, unused
  virtual std::string Piece(int id, int* kind) const = 0;
};

// The plugin's exported factory.
extern "C" {
using CreateSentencePieceBackendFn = SentencePieceBackend* (*)();
}
inline constexpr char kCreateSentencePieceBackend[] = "abcd_create_sentencepiece_backend";

}  // namespace abcd
