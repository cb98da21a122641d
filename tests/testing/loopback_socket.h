// A socket of a test's own on 127.0.0.1, on a port the kernel picks: a scripted server, a DNS
// server, a port that accepts connections and never answers.

#ifndef LLMSERVE_TESTS_TESTING_LOOPBACK_SOCKET_H_
#define LLMSERVE_TESTS_TESTING_LOOPBACK_SOCKET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace llmserve::testing {

struct LoopbackSocket {
  // -1 when the socket could not be made.
  int fd = -1;
  int port = 0;
};

// A UDP socket (SOCK_DGRAM), or a TCP one (SOCK_STREAM) already listening with `backlog`: the
// kernel completes that many connections on its own, whether or not anyone accepts them.
inline LoopbackSocket BindLoopback(int type, int backlog = 16) {
  LoopbackSocket bound;
  const int fd = socket(AF_INET, type, 0);
  if (fd < 0) return bound;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      (type == SOCK_STREAM && listen(fd, backlog) != 0) ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    return bound;
  }
  bound.fd = fd;
  bound.port = ntohs(address.sin_port);
  return bound;
}

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_LOOPBACK_SOCKET_H_
