// Interrupt signals as values; see interrupt.h.
#include "cli/interrupt.h"

#include <poll.h>

#include <atomic>
#include <cerrno>

namespace sandstream::cli {
namespace {

std::atomic<int> g_pending{0};
sigset_t g_wait_mask;
bool g_installed = false;

void OnSignal(int sig) { g_pending.store(sig); }

}  // namespace

void IgnoreSigpipe() { std::signal(SIGPIPE, SIG_IGN); }

void InstallInterruptHandlers() {
  sigset_t block;
  sigemptyset(&block);
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    sigaction(sig, &sa, nullptr);
    sigaddset(&block, sig);
  }
  sigprocmask(SIG_BLOCK, &block, &g_wait_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigdelset(&g_wait_mask, sig);
  g_installed = true;
}

const sigset_t* WaitMask() { return g_installed ? &g_wait_mask : nullptr; }

int TakePendingSignal() { return g_pending.exchange(0); }

int SleepInterruptibly(std::chrono::milliseconds duration) {
  auto deadline = std::chrono::steady_clock::now() + duration;
  while (true) {
    if (int sig = TakePendingSignal(); sig != 0) return sig;
    auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    timespec ts{static_cast<time_t>(left.count() / 1'000'000'000),
                static_cast<long>(left.count() % 1'000'000'000)};
    ppoll(nullptr, 0, &ts, WaitMask());
  }
}

}  // namespace sandstream::cli
