// Signal names and numbers, as the API spells them ("TERM", "SIGTERM", "15"), and signals sent
// through pidfds (never a bare pid, which may have been reused).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sandstream {

// Accepts "TERM", "SIGTERM", "sigterm" or a number 1..64; nullopt for anything else.
std::optional<int> ParseSignal(std::string_view text);
// "SIGTERM" for 15; "SIG<n>" for a number without a name.
std::string SignalName(int sig);
// `sig` to the process `pidfd` refers to; 0, or the errno (ESRCH once it has exited).
int SignalPidfd(int pidfd, int sig);
// The pid, in this process's pid namespace, of the process `pidfd` refers to (its "Pid:" in
// fdinfo); -1 once it has been reaped.
int PidOfPidfd(int pidfd);

}  // namespace sandstream
