#include "platform/signals.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdlib>

#include "platform/fd.h"

namespace sandstream {
namespace {

struct Named {
  std::string_view name;
  int number;
};

constexpr Named kSignals[] = {
    {"HUP", SIGHUP},       {"INT", SIGINT},   {"QUIT", SIGQUIT},   {"ILL", SIGILL},
    {"TRAP", SIGTRAP},     {"ABRT", SIGABRT}, {"BUS", SIGBUS},     {"FPE", SIGFPE},
    {"KILL", SIGKILL},     {"USR1", SIGUSR1}, {"SEGV", SIGSEGV},   {"USR2", SIGUSR2},
    {"PIPE", SIGPIPE},     {"ALRM", SIGALRM}, {"TERM", SIGTERM},   {"CHLD", SIGCHLD},
    {"CONT", SIGCONT},     {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},   {"TTIN", SIGTTIN},
    {"TTOU", SIGTTOU},     {"URG", SIGURG},   {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ},
    {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"IO", SIGIO},
    {"PWR", SIGPWR},       {"SYS", SIGSYS},
};

}  // namespace

std::optional<int> ParseSignal(std::string_view text) {
  if (text.empty()) return std::nullopt;
  if (std::isdigit(static_cast<unsigned char>(text[0]))) {
    int n = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || ptr != text.data() + text.size() || n < 1 || n > 64)
      return std::nullopt;
    return n;
  }
  std::string upper;
  for (char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string_view name = upper;
  if (name.starts_with("SIG")) name.remove_prefix(3);
  for (const auto& s : kSignals) {
    if (s.name == name) return s.number;
  }
  return std::nullopt;
}

std::string SignalName(int sig) {
  for (const auto& s : kSignals) {
    if (s.number == sig) return "SIG" + std::string(s.name);
  }
  return "SIG" + std::to_string(sig);
}

int SignalPidfd(int pidfd, int sig) {
  return ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0 ? 0 : errno;
}

int PidOfPidfd(int pidfd) {
  auto info = ReadFile("/proc/self/fdinfo/" + std::to_string(pidfd));
  if (!info) return -1;
  const size_t at = info->find("\nPid:");
  if (at == std::string::npos) return -1;
  return static_cast<int>(std::strtol(info->c_str() + at + 5, nullptr, 10));
}

}  // namespace sandstream
