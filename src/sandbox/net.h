// Networking of a sandbox: a private network namespace with only loopback, brought up in the
// child, or (network "none") nothing up at all. (Egress, when it comes, is a veth added here,
// selected by SandboxSpec::network; docs/network/egress-design.md.)
#pragma once

namespace sandstream::sandbox {

// Sets IFF_UP on "lo" of the current network namespace. Async-signal-safe.
void LoopbackUpInChild(int report_fd);

}  // namespace sandstream::sandbox
