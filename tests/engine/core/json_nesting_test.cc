// CheckJsonNesting (engine/core/json_nesting.h): the one nesting limit for every JSON text.
#include "engine/core/json_nesting.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace abcd {
namespace {

std::string Nested(int depth, char open = '[', char close = ']') {
  return std::string(depth, open) + std::string(depth, close);
}

TEST(JsonNesting, AcceptsUpToTheLimit) {
  EXPECT_TRUE(CheckJsonNesting("", "").ok());
  EXPECT_TRUE(CheckJsonNesting("1", "").ok());
  EXPECT_TRUE(CheckJsonNesting(Nested(kMaxJsonNesting), "").ok());
  EXPECT_TRUE(CheckJsonNesting(Nested(3), "", 3).ok());
  EXPECT_FALSE(CheckJsonNesting(Nested(4), "", 3).ok());
  // Siblings do not add up: depth is the deepest chain, not the number of brackets.
  std::string wide = "[";
  for (int i = 0; i < 10000; ++i) wide += "[[]],";
  wide += "1]";
  EXPECT_TRUE(CheckJsonNesting(wide, "", 3).ok());
}

TEST(JsonNesting, RefusesDeepNestingNamingTheField) {
  const std::string body = R"({"model": "m", "tools": [{"type": "function", "function": )"
                           R"({"name": "f", "parameters": )" +
                           Nested(60000, '[', ']') + "}}]}";
  const absl::Status status = CheckJsonNesting(body, "");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(status.message(), "tools[0].function.parameters[0][0]")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "...")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "deeper than 256 levels")) << status;
  EXPECT_LT(status.message().size(), 200u) << status;
}

TEST(JsonNesting, CountsArrayIndicesAndObjectKeys) {
  const absl::Status status = CheckJsonNesting(
      R"({"a": 1, "messages": [{"role": "user"}, {"content": [[[[1]]]]}]})", "", 5);
  EXPECT_EQ(status.message(), "messages[1].content[0][0] nests JSON deeper than 5 levels");
  const absl::Status top = CheckJsonNesting(Nested(10), "", 5);
  EXPECT_EQ(top.message(), "request body[0][0][0][0][0] nests JSON deeper than 5 levels");
  const absl::Status file = CheckJsonNesting(R"({"layers": [[[[]]]]})", "config.json", 3);
  EXPECT_EQ(file.message(), "config.json: layers[0][0] nests JSON deeper than 3 levels");
}

TEST(JsonNesting, IgnoresBracketsInsideStrings) {
  const std::string in_string = "{\"a\": \"" + Nested(1000) + "\\\"[[[[\\\\\"}";
  EXPECT_TRUE(CheckJsonNesting(in_string, "", 2).ok());
  // An escaped quote does not end the string; an escaped backslash before a quote does.
  EXPECT_FALSE(CheckJsonNesting(R"({"k\\": [[[[]]]]})", "", 3).ok());
  EXPECT_TRUE(CheckJsonNesting(R"({"k\"[[[[": 1})", "", 3).ok());
}

TEST(JsonNesting, LongKeysAreCutInTheMessage) {
  const std::string key(10000, 'k');
  const absl::Status status = CheckJsonNesting("{\"" + key + "\": [[[1]]]}", "", 2);
  EXPECT_FALSE(status.ok());
  EXPECT_LT(status.message().size(), 120u) << status;
}

TEST(JsonNesting, UnterminatedInputIsLeftToTheParser) {
  EXPECT_TRUE(CheckJsonNesting("{\"a\": \"unterminated", "").ok());
  EXPECT_TRUE(CheckJsonNesting("]]]]}}}", "").ok());
  EXPECT_TRUE(CheckJsonNesting("\"\\", "").ok());
}

}  // namespace
}  // namespace abcd
