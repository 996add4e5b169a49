// abcd-loadtest's HTTP driver against a tiny loopback server that, like llama.cpp's, closes
// each keep-alive connection shortly after a streamed response (without saying so in a
// Connection header): the driver's next request on that connection fails before any answer,
// and must be sent again on a new one, so no request counts as an error.
#include "loadtest/lib/http_driver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace abcd::loadtest {
namespace {

class ClosingServer {
 public:
  ClosingServer() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    listen(fd_, 16);
    socklen_t length = sizeof(address);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ClosingServer() {
    stop_.store(true);
    thread_.join();
    close(fd_);
  }
  int port() const { return port_; }
  int connections() const { return connections_.load(); }

 private:
  static std::string Chunk(const std::string& data) {
    return absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n");
  }

  void Serve() {
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int client = accept(fd_, nullptr, nullptr);
      if (client < 0) continue;
      connections_.fetch_add(1);
      std::string request;
      char buffer[4096];
      size_t header_end = std::string::npos;
      size_t length = 0;
      while (header_end == std::string::npos || request.size() < header_end + 4 + length) {
        const ssize_t n = recv(client, buffer, sizeof(buffer), 0);
        if (n <= 0) break;
        request.append(buffer, static_cast<size_t>(n));
        if (header_end == std::string::npos) {
          header_end = request.find("\r\n\r\n");
          const size_t at = request.find("Content-Length: ");
          if (header_end != std::string::npos && at != std::string::npos) {
            const size_t end = request.find("\r\n", at);
            (void)absl::SimpleAtoi(request.substr(at + 16, end - at - 16), &length);
          }
        }
      }
      const std::string response =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
          "Transfer-Encoding: chunked\r\n\r\n" +
          Chunk(R"(data: {"choices":[{"index":0,"text":"hi","finish_reason":null}]})"
                "\n\n") +
          Chunk(R"(data: {"choices":[{"index":0,"text":"","finish_reason":"length"}],)"
                R"("usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}})"
                "\n\n") +
          Chunk("data: [DONE]\n\n") + "0\r\n\r\n";
      send(client, response.data(), response.size(), MSG_NOSIGNAL);
      // Closes a moment later: the client has already sent its next request on this connection.
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      close(client);
    }
  }

  int fd_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

TEST(HttpDriver, RetriesRequestsOnConnectionsTheServerClosedAfterAResponse) {
  ClosingServer server;
  auto driver = MakeHttpDriver("127.0.0.1", server.port(), Endpoint::kHttpCompletions, 1);
  constexpr int kRequests = 20;
  int ok = 0;
  for (int i = 0; i < kRequests; ++i) {
    RequestSpec spec;
    spec.index = i;
    spec.prompt = "x";
    spec.timeout_s = 5;
    std::promise<RequestRecord> done;
    driver->Start(spec, [&done](RequestRecord record) { done.set_value(std::move(record)); });
    const RequestRecord record = done.get_future().get();
    EXPECT_TRUE(record.ok) << i << ": " << record.status << " " << record.error;
    EXPECT_EQ(record.text, "hi");
    if (record.ok) ++ok;
  }
  EXPECT_EQ(ok, kRequests);
  EXPECT_EQ(server.connections(), kRequests);  // one connection per request
}

}  // namespace
}  // namespace abcd::loadtest
