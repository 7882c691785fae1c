// Loopback up with one ioctl: no netlink library, nothing to allocate after clone().
#include "sandbox/net.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sandbox/child_report.h"
#include "sandbox/fault.h"

namespace sandstream::sandbox {

void LoopbackUpInChild(int report_fd) {
  int fd = InjectedFault() ? -1 : ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) ReportAndExit(report_fd, "net: socket", errno);
  struct ifreq req{};
  std::memcpy(req.ifr_name, "lo", 3);
  if (::ioctl(fd, SIOCGIFFLAGS, &req) != 0) ReportAndExit(report_fd, "net: SIOCGIFFLAGS lo", errno);
  req.ifr_flags = static_cast<short>(req.ifr_flags | IFF_UP | IFF_RUNNING);
  if (::ioctl(fd, SIOCSIFFLAGS, &req) != 0) ReportAndExit(report_fd, "net: SIOCSIFFLAGS lo", errno);
  ::close(fd);
}

}  // namespace sandstream::sandbox
