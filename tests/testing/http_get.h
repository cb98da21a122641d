// A plain HTTP/1.0 GET on loopback for tests (metrics scrapes): no client library needed.

#ifndef LLMSERVE_TESTS_TESTING_HTTP_GET_H_
#define LLMSERVE_TESTS_TESTING_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>

namespace llmserve::testing {

// The response body of GET `path` on 127.0.0.1:`port`, or "" when the request fails. Times out
// after 10 s so a stuck server fails the test instead of hanging it.
inline std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval timeout{.tv_sec = 10, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
      char buffer[65536];
      ssize_t n;
      while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
    }
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_HTTP_GET_H_
