// The bundled checkpoints (models/checkpoints/) the tests load, by absolute path: the untrained
// placeholders (fast) and the trained models. Needs ABCD_SOURCE_DIR, which tests/CMakeLists.txt
// defines for the targets that include this. Constants: thread-safe.
#pragma once

#include <string>

#ifndef ABCD_SOURCE_DIR
#error "tests/testing/model_dirs.h needs ABCD_SOURCE_DIR (the repository root)"
#endif

namespace abcd::testing {

inline const std::string kLmDir =
    std::string(ABCD_SOURCE_DIR) + "/models/checkpoints/abc-lm-untrained";
inline const std::string kMtDir =
    std::string(ABCD_SOURCE_DIR) + "/models/checkpoints/abc-mt-untrained";
// A GMAT encoder (issue 16): cross attention over 8 memory rows.
inline const std::string kGmatDir =
    std::string(ABCD_SOURCE_DIR) + "/models/checkpoints/gmat-mt-untrained";
inline const std::string kTrainedLmDir =
    std::string(ABCD_SOURCE_DIR) + "/models/checkpoints/abc-lm";
inline const std::string kEnDeDir = std::string(ABCD_SOURCE_DIR) + "/models/checkpoints/abc-en-de";

}  // namespace abcd::testing
