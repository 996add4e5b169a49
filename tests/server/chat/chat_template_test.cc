// Where a model's chat template comes from and how its rendered prompt is tokenized
// (server/chat/chat_template.h).
#include "server/chat/chat_template.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/core/server_config.h"
#include "tests/testing/read_file.h"

namespace abcd::chat {
namespace {

using testing::ReadFile;

class ChatTemplateLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("chat_template_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  Value Conversation() {
    return *ParseChatMessages(nlohmann::json::parse(R"([{"role": "user", "content": "Hi"}])"));
  }
  std::filesystem::path dir_;
};

TEST_F(ChatTemplateLoad, BuiltinIsTheFixtureAndRendersATranscript) {
  EXPECT_EQ(kBuiltinChatTemplate,
            ReadFile(std::string(ABCD_FIXTURE_DIR) + "/chat/templates/builtin-plain.jinja"));
  auto chat = ChatTemplate::Load(dir_.string(), "");  // no tokenizer_config.json
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ((*chat)->origin(), "built-in chat template");
  EXPECT_EQ(*(*chat)->Render(Conversation(), true), "user: Hi\nassistant:");
}

TEST_F(ChatTemplateLoad, ReadsTokenizerConfigAndTheOverride) {
  Write("tokenizer_config.json",
        R"({"bos_token": {"content": "<B>"}, "eos_token": "<E>",
            "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}"})");
  auto chat = ChatTemplate::Load(dir_.string(), "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(*(*chat)->Render(Conversation(), true), "<B>Hi<E>");
  Write("tokenizer_config.json",
        R"({"chat_template": [{"name": "tool_use", "template": "x"},
                              {"name": "default", "template": "D{{ eos_token }}"}]})");
  chat = ChatTemplate::Load(dir_.string(), "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(*(*chat)->Render(Conversation(), true), "D</s>");
  Write("override.jinja", "O:{{ messages[0].content }}");
  chat = ChatTemplate::Load(dir_.string(), (dir_ / "override.jinja").string());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(*(*chat)->Render(Conversation(), true), "O:Hi");
}

// --chat_template files that cannot serve fail the load, each message naming the flag and file.
TEST_F(ChatTemplateLoad, ABadOverrideFileIsRefusedNamingTheFlag) {
  const std::string missing = (dir_ / "missing.jinja").string();
  auto chat = ChatTemplate::Load(dir_.string(), missing);
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(chat.status().message(),
            "--chat_template " + missing + ": not found or not a regular file");
  chat = ChatTemplate::Load(dir_.string(), dir_.string());  // a directory
  ASSERT_FALSE(chat.ok());
  EXPECT_TRUE(absl::StartsWith(chat.status().message(), "--chat_template " + dir_.string()));
  Write("broken.jinja", "{% for m in messages %}{{ m.content }}");
  const std::string broken = (dir_ / "broken.jinja").string();
  chat = ChatTemplate::Load(dir_.string(), broken);
  ASSERT_FALSE(chat.ok());
  EXPECT_TRUE(absl::StartsWith(chat.status().message(), "--chat_template " + broken + ": "))
      << chat.status();
  // The override wins over a tokenizer_config.json template that would not parse.
  Write("tokenizer_config.json", R"({"chat_template": "{% macro m() %}{% endmacro %}"})");
  Write("ok.jinja", "ok");
  EXPECT_TRUE(ChatTemplate::Load(dir_.string(), (dir_ / "ok.jinja").string()).ok());
}

// --chat_template FILE (every language model), MODEL=FILE, several separated by commas.
TEST(ChatTemplateFlag, ParsesFileAndModelFilePairs) {
  auto parse = [](const std::string& value) {
    return ParseServerConfig({"--chat_template", value}, {"models/checkpoints/abc-lm"});
  };
  auto config = parse("/t/all.jinja");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->chat_templates, (std::map<std::string, std::string>{{"", "/t/all.jinja"}}));
  config = parse("abc-lm=/t/a.jinja,other=/t/b.jinja,/t/rest.jinja");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->chat_templates,
            (std::map<std::string, std::string>{
                {"abc-lm", "/t/a.jinja"}, {"other", "/t/b.jinja"}, {"", "/t/rest.jinja"}}));
  config = ParseServerConfig({}, {"models/checkpoints/abc-lm"});
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(config->chat_templates.empty());
  for (const std::string bad : {"abc-lm=", "=/t/a.jinja", "a=/t/1,a=/t/2", "/t/1,/t/2"}) {
    config = parse(bad);
    ASSERT_FALSE(config.ok()) << bad;
    EXPECT_TRUE(absl::StartsWith(config.status().message(), "--chat_template must be"))
        << config.status();
  }
}

// A model's own template that does not parse: the model loads (it serves completions) and each
// chat request is a 400 naming the file and the line; an unsupported construct fails only the
// requests that reach it.
TEST_F(ChatTemplateLoad, ABrokenTokenizerConfigTemplateLoadsAndRefusesEachChatRequest) {
  Write("tokenizer_config.json", R"({"chat_template": "ok\n{% for m in messages %}"})");
  auto chat = ChatTemplate::Load(dir_.string(), "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  absl::StatusOr<std::string> out = (*chat)->Render(Conversation(), true);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(out.status().message(),
                               "messages: the model's chat template cannot be used: "))
      << out.status();
  EXPECT_TRUE(absl::StrContains(
      out.status().message(), "tokenizer_config.json: chat template line 2: missing {% endfor %}"))
      << out.status();
  Write("tokenizer_config.json",
        R"({"chat_template": "{% if messages | length > 1 %}{% include 'x' %}{% endif %}ok"})");
  chat = ChatTemplate::Load(dir_.string(), "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(*(*chat)->Render(Conversation(), true), "ok");
}

TEST_F(ChatTemplateLoad, ATokenizerConfigTemplateIsCappedAtOneMiBLikeTheFlag) {
  const std::string big = std::string((size_t{1} << 20) + 1, 'x');
  Write("tokenizer_config.json", nlohmann::json({{"chat_template", big}}).dump());
  auto chat = ChatTemplate::Load(dir_.string(), "");
  ASSERT_FALSE(chat.ok());
  EXPECT_TRUE(absl::StrContains(
      chat.status().message(), "tokenizer_config.json: chat_template is larger than 1048576 bytes"))
      << chat.status();
  Write("override.jinja", big);
  chat = ChatTemplate::Load(dir_.string(), (dir_ / "override.jinja").string());
  ASSERT_FALSE(chat.ok());
  EXPECT_TRUE(absl::StrContains(chat.status().message(), "larger than 1048576 bytes"));
  // A config with a 1 MiB template and more (added tokens) still loads.
  Write("tokenizer_config.json",
        nlohmann::json({{"chat_template", std::string(size_t{1} << 20, 'y')},
                        {"added_tokens", std::string(size_t{2} << 20, 'z')}})
            .dump());
  EXPECT_TRUE(ChatTemplate::Load(dir_.string(), "").ok());
}

// Issue 44: a tokenizer_config.json nested past the JSON limit is refused before it is parsed,
// naming the file (a value 100,000 deep would crash whatever walked it).
TEST_F(ChatTemplateLoad, ADeeplyNestedTokenizerConfigIsRefusedNamingTheFile) {
  Write("tokenizer_config.json", R"({"chat_template": "x", "extra": )" + std::string(100000, '[') +
                                     std::string(100000, ']') + "}");
  auto chat = ChatTemplate::Load(dir_.string(), "");
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(chat.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(chat.status().message(),
                                "tokenizer_config.json: extra[0][0][0][0][0][0][0]... nests JSON "
                                "deeper than 256 levels"))
      << chat.status();
}

// transformers passes only the special tokens a tokenizer has: a null bos_token is undefined in
// the template (renders nothing), never "<s>".
TEST_F(ChatTemplateLoad, ANullBosTokenIsUndefinedNotInvented) {
  Write("tokenizer_config.json",
        R"({"bos_token": null, "eos_token": "<|im_end|>",
            "chat_template": "[{{ bos_token }}]{{ bos_token is defined }}{{ eos_token }}"})");
  auto chat = ChatTemplate::Load(dir_.string(), "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ((*chat)->bos_token(), "");
  EXPECT_EQ(*(*chat)->Render(Conversation(), true), "[]False<|im_end|>");
}

TEST_F(ChatTemplateLoad, ARenderOverBudgetIsAnInvalidArgumentNamingMessages) {
  Write("tokenizer_config.json",
        R"({"chat_template": "{% set s = 'a' * 4000000 %}{{ s.replace('a', s) }}"})");
  auto chat = ChatTemplate::Load(dir_.string(), "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  absl::StatusOr<std::string> out = (*chat)->Render(Conversation(), true);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(out.status().message(),
                               "messages: the chat template's render exceeded its memory budget"))
      << out.status();
  // The caller's hook ends a long render.
  Write(
      "tokenizer_config.json",
      R"({"chat_template": "{% for a in range(100000) %}{% for m in messages %}{% endfor %}{% endfor %}"})");
  chat = ChatTemplate::Load(dir_.string(), "");
  ASSERT_TRUE(chat.ok()) << chat.status();
  out = (*chat)->Render(Conversation(), true, [] { return true; });
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(out.status().message(), "messages: the chat template's render was cancelled");
}

TEST(ChatMessages, NormalisesTextPartsAndNamesBadFields) {
  auto messages = ParseChatMessages(nlohmann::json::parse(
      R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])"));
  ASSERT_TRUE(messages.ok());
  EXPECT_EQ((*messages->list)[0].Find("content")->s.str(), "a\nb");
  auto bad = ParseChatMessages(nlohmann::json::parse(R"([{"role": "user"}])"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "messages[0].content is required");
}

}  // namespace
}  // namespace abcd::chat
