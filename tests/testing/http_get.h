// Plain HTTP/1.0 on loopback for tests (metrics scrapes, health, streams): no client library
// needed.

#ifndef LLMSERVE_TESTS_TESTING_HTTP_GET_H_
#define LLMSERVE_TESTS_TESTING_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>

namespace llmserve::testing {

// Sends `request` (a whole HTTP message) to 127.0.0.1:`port` and returns everything the server
// sends until it closes the connection (status line, headers and body), or what arrived before
// `timeout_seconds`. `on_data`, when given, sees the response so far after every read (to notice
// that a stream has started).
inline std::string HttpExchange(int port, const std::string& request, int timeout_seconds = 60,
                                const std::function<void(const std::string&)>& on_data = nullptr) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval timeout{.tv_sec = 1, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
    const time_t deadline = time(nullptr) + timeout_seconds;
    char buffer[65536];
    while (time(nullptr) < deadline) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        break;
      }
      response.append(buffer, n);
      if (on_data) on_data(response);
    }
  }
  close(fd);
  return response;
}

// The response body of GET `path` on 127.0.0.1:`port`, or "" when the request fails. Times out
// after 10 s so a stuck server fails the test instead of hanging it.
inline std::string HttpGet(int port, const std::string& path) {
  const std::string response =
      HttpExchange(port, "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n", 10);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

// A POST of a JSON body as HTTP/1.0 (so the response is not chunked and ends with the connection),
// with `authorization` as its Authorization header when not empty.
inline std::string HttpPostRequest(const std::string& path, const std::string& json,
                                   const std::string& authorization = "") {
  return "POST " + path + " HTTP/1.0\r\nHost: localhost\r\ncontent-type: application/json\r\n" +
         (authorization.empty() ? "" : "authorization: " + authorization + "\r\n") +
         "content-length: " + std::to_string(json.size()) + "\r\n\r\n" + json;
}

// The status code of a raw HTTP response ("HTTP/1.1 503 ..." -> 503), or 0.
inline int HttpStatus(const std::string& response) {
  if (response.size() < 12 || response.compare(0, 5, "HTTP/") != 0) return 0;
  return std::atoi(response.c_str() + 9);
}

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_HTTP_GET_H_
