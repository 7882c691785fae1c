// Turns SIGINT, SIGTERM and SIGHUP into values the CLI acts on (forward to the remote process,
// clean up a throwaway sandbox) instead of dying mid-request; ignores SIGPIPE.
#pragma once

#include <chrono>
#include <csignal>

namespace sandstream::cli {

// Ignores SIGPIPE (a closed stdout or socket then fails with EPIPE). Safe to call once at start.
void IgnoreSigpipe();

// Records SIGINT/SIGTERM/SIGHUP instead of dying. They stay blocked except while the HTTP layer
// waits for the server (see WaitMask), so none can be lost between a check and a wait.
void InstallInterruptHandlers();

// The signal mask to wait with (interrupt signals unblocked), or nullptr when no handlers are
// installed.
const sigset_t* WaitMask();

// The signal received since the last call, or 0.
int TakePendingSignal();

// Sleeps; returns early with the signal number if an interrupt signal arrives, else 0.
int SleepInterruptibly(std::chrono::milliseconds duration);

}  // namespace sandstream::cli
