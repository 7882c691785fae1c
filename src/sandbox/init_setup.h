// The child side of a sandbox's clone3 (init_setup.cc): what the parent prepares before the
// clone, and the ordered steps the child runs from the clone to the exec of its PID 1.
// Nothing here may allocate once the clone is made: InitLaunch holds only pointers and numbers.
#pragma once

#include <cstddef>

#include "sandbox/mounts.h"

namespace sandstream::sandbox {

// Everything the child of Create needs, prepared before clone(): after it, nothing allocates.
struct InitLaunch {
  const RootPlan* plan;
  const char* dir;
  // The numbers under which the child keeps the template's idmapped layers and then the
  // volumes, which come with the parent's go-ahead (the plan refers to them).
  const int* layer_fds;
  size_t layer_count;
  const char* hostname;
  size_t hostname_len;
  int sync_fd;
  int control_fd;
  int report_fd;
  bool loopback;  // network "loopback": lo up; "none": no interface up at all
  // The parent's ends of those: the child's copies are closed first thing, or the child would
  // hold both ends of its go-ahead's socket and never see the parent give up, or die.
  int parent_fds[3];
};

// In the child of clone3, as the host's uid 0 in the sandbox's new namespaces: waits for the
// parent's go-ahead, sets the sandbox up step by step and execs PID 1. Never returns: on a
// failure it reports {step, errno} on report_fd and exits (child_report.h).
[[noreturn]] void RunInitSetup(const InitLaunch& l);

}  // namespace sandstream::sandbox
