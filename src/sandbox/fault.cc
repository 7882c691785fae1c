#include "sandbox/fault.h"

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <new>

namespace sandstream::sandbox {
namespace {

struct Faults {
  std::atomic<int> target;
  std::atomic<int> reached;
};
static_assert(std::atomic<int>::is_always_lock_free);

Faults* faults = nullptr;  // a MAP_SHARED page once a test arms it

}  // namespace

void FailNthStep(int n) {
  if (faults == nullptr) {
    void* page = ::mmap(nullptr, sizeof(Faults), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return;
    faults = new (page) Faults{};
  }
  faults->reached = 0;
  faults->target = n;
}

int StepsReached() { return faults == nullptr ? 0 : faults->reached.load(); }

bool InjectedFault() {
  if (faults == nullptr || faults->target.load(std::memory_order_relaxed) == 0) return false;
  if (faults->reached.fetch_add(1) + 1 != faults->target.load()) return false;
  errno = EIO;
  return true;
}

}  // namespace sandstream::sandbox
