// `sandstream shell`: attaches the local terminal to a terminal in a sandbox over the exec/pty
// WebSocket. Raw mode while attached, the remote size follows the local window (SIGWINCH), and
// the result is the remote shell's exit status.
#pragma once

#include <optional>
#include <string>

#include "cli/http.h"

namespace sandstream::cli {

struct ShellOptions {
  std::string sandbox_id;
  std::string cmd;          // empty: the sandbox's login shell
  std::string terminal_id;  // non-empty: reattach to this terminal instead of starting one
};

// Returns the exit status to exit with: the remote exit code; 2 after an error (printed as
// `sandstream: CODE: MESSAGE`); 255 when the connection ended without an exit.
int RunShell(const Endpoint& endpoint, const std::string& api_key, const ShellOptions& options);

}  // namespace sandstream::cli
