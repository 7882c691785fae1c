// Terminals over a WebSocket, for sandstream's exec/pty and the Cloudflare adapter's /ws/pty:
// a terminal outlives its connections, each new one gets what its log retains and then follows
// it, its input is written as it comes (binary frames) and its control messages (text frames)
// resize it. The two differ only in the messages they say (a TerminalWire).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>

#include "api/http.h"
#include "base/result.h"
#include "process/cursor.h"
#include "process/process.h"
#include "process/terminal.h"
#include "service/service.h"

namespace sandstream::api {

struct OpenedTerminal {
  std::shared_ptr<Process> process;
  std::shared_ptr<Terminal> terminal;  // null once the process has exited
};

// The terminal `id` of the sandbox (kNotFound when it has none by that id), resized to `rows`
// and `cols` where given.
Result<OpenedTerminal> FindTerminal(Context& ctx, const SandboxEntry& sb, std::string_view id,
                                    std::optional<int> rows, std::optional<int> cols);

// A new terminal: `cmd` (a login shell when empty) in the sandbox's cwd and env, as process
// `id` (a new id when empty).
struct TerminalStart {
  std::string id;
  std::string cmd;
  bool as_root = false;
  std::optional<int> rows;
  std::optional<int> cols;
};
boost::asio::awaitable<Result<OpenedTerminal>> StartTerminal(Context& ctx, const SandboxEntry& sb,
                                                             TerminalStart start);

// What a wire says in text frames besides the output (binary frames). Null: says nothing then.
struct TerminalWire {
  std::string (*start)(const Process&);             // first
  std::string (*ready)(const Process&);             // once the replay is out
  std::string (*exit)(const Process&);              // after the last output
  std::string (*gap)(const Process&, const Gap&);   // output a skipping client missed
  std::string (*error)(const Error&);               // a control message it could not apply
};

// Accepts the WebSocket upgrade and serves the terminal until the client goes or it ends.
boost::asio::awaitable<void> ServeTerminal(Context& ctx, OpenedTerminal opened, Flow flow,
                                           const TerminalWire& wire);

// The request is a WebSocket upgrade, or kInvalidRequest saying it must be.
Result<void> RequireUpgrade(const Context& ctx);
// ?rows= / ?cols=: 1 to 1000 cells, nullopt when absent.
Result<std::optional<int>> CellsQuery(const Context& ctx, std::string_view name);

}  // namespace sandstream::api
