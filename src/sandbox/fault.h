// Fault injection for tests: the n-th step of sandbox creation (the setup children's steps
// included) fails as if its syscall had failed with EIO, so a test can fail every step in turn
// and check that each failure names its step and leaves nothing behind. Off unless a test arms
// it; then it costs a load and a branch per step.
#pragma once

namespace sandstream::sandbox {

// Fails the n-th fault point reached from now on (1-based; 0 disarms). The count lives in a
// shared mapping, so the children cloned afterwards (which run the setup steps before their
// exec) count in the same sequence as the daemon.
void FailNthStep(int n);
// How many fault points were reached since FailNthStep.
int StepsReached();
// True, with errno set to EIO, when this point is the one to fail. Async-signal-safe.
bool InjectedFault();

}  // namespace sandstream::sandbox
