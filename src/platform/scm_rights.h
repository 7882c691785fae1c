// Passing fds with one message over a unix socket (SCM_RIGHTS), for the daemon, the child of a
// sandbox's clone3 (init_setup.cc) and its PID 1, the keeper (init_main.cc), alike.
// Header-only, so that the static keeper links nothing for it; fixed-size buffers on the stack,
// no allocation, no exceptions, and only async-signal-safe calls (sendmsg, recvmsg, close,
// memcpy, memset).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace sandstream {

// Sends `len` bytes of `data` as one message with `count` fds (at most N) attached, retrying on
// EINTR, without SIGPIPE. The bytes sent, or -1 with errno (EINVAL: more than N fds).
template <size_t N>
ssize_t SendWithFds(int socket, const void* data, size_t len, const int* fds, size_t count) {
  if (count > N) {
    errno = EINVAL;
    return -1;
  }
  iovec iov{const_cast<void*>(data), len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * N)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * count);
  }
  ssize_t n;
  do {
    n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

// The fds that came with one message (ReceiveWithFds), close-on-exec, in the order sent.
template <size_t N>
struct ReceivedFds {
  int fds[N];
  size_t count = 0;
  // False when the message or its fds were cut short (MSG_TRUNC, MSG_CTRUNC), or it carried
  // more than N fds: those past N have been closed.
  bool complete = true;
};

// Receives one message into `data` (at most `len` bytes) and up to N fds with it, retrying on
// EINTR; `flags` go with MSG_CMSG_CLOEXEC (MSG_DONTWAIT, say). The bytes received (0: the peer
// is gone), or -1 with errno.
template <size_t N>
ssize_t ReceiveWithFds(int socket, void* data, size_t len, ReceivedFds<N>& out, int flags = 0) {
  out.count = 0;
  out.complete = true;
  iovec iov{data, len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * N)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(socket, &msg, flags | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return n;
  out.complete = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t in_header = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < in_header; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof fd, sizeof fd);
      if (out.count < N) {
        out.fds[out.count++] = fd;
      } else {
        ::close(fd);
        out.complete = false;
      }
    }
  }
  return n;
}

}  // namespace sandstream
