// A client's WebSocket frames after the upgrade, through Beast's server side with the options
// the daemon sets, then each message as the routes take it: a terminal's control messages and
// input (GET exec/pty), a command request of exec/ws. After an even first byte comes what a
// client sends; after an odd one, messages this target frames, so that mutations of their text
// reach the handlers instead of breaking a frame's length or mask.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

#include "api/common/terminal_control.h"
#include "api/request.h"
#include "api/websocket.h"
#include "api_context.h"
#include "check.h"

namespace sandstream::fuzz {
namespace {

namespace beast = boost::beast;
namespace json = boost::json;
namespace websocket = beast::websocket;

// GET exec/pty: text frames and binary frames that are control messages go to ApplyControl.
void AsTerminal(const std::string& data, bool binary) {
  if (binary && !api::IsBinaryControl(data)) return;  // input, written as it is
  std::string_view text(data);
  if (binary) text.remove_prefix(1);
  auto input = api::ApplyControl(nullptr, text);
  if (input) FUZZ_CHECK(input->size() <= text.size());
}

// GET exec/ws: a JSON object, its `id` the client's tag, the rest a command request.
void AsExec(api::Context& ctx, const std::string& data, bool binary) {
  if (binary) return;
  boost::system::error_code ec;
  json::value v = json::parse(data, ec);
  if (ec || !v.is_object()) return;
  auto& o = v.as_object();
  o.erase("id");
  (void)api::ParseCommand(ctx, o, World().sandbox, api::CommandKind::kExec);
}

// One client frame: masked (a zero key leaves the payload as it is), `fin` or not.
void AppendFrame(std::string& out, int opcode, bool fin, std::string_view payload, uint32_t key) {
  out += static_cast<char>((fin ? 0x80 : 0) | opcode);
  const size_t n = payload.size();
  if (n < 126) {
    out += static_cast<char>(0x80 | n);
  } else {
    out += static_cast<char>(0x80 | 126);
    out += static_cast<char>(n >> 8);
    out += static_cast<char>(n & 0xff);
  }
  char mask[4];
  for (int i = 0; i < 4; ++i) mask[i] = static_cast<char>(key >> (8 * i));
  out.append(mask, 4);
  for (size_t i = 0; i < n; ++i) out += static_cast<char>(payload[i] ^ mask[i % 4]);
}

// Messages of at most 64 KiB, each text or binary, whole or in two fragments around a ping.
std::string Frames(FuzzedDataProvider& in) {
  std::string out;
  while (in.remaining_bytes() > 0) {
    const auto flags = in.ConsumeIntegral<uint8_t>();
    const uint32_t key = (flags & 4) ? in.ConsumeIntegral<uint32_t>() : 0;
    const std::string payload = in.ConsumeRandomLengthString(65535);
    const int opcode = (flags & 1) ? 2 : 1;
    if (flags & 2) {
      const size_t cut = payload.size() / 2;
      AppendFrame(out, opcode, false, std::string_view(payload).substr(0, cut), key);
      AppendFrame(out, 9, true, "ping", key);
      AppendFrame(out, 0, true, std::string_view(payload).substr(cut), key);
    } else {
      AppendFrame(out, opcode, true, payload, key);
    }
  }
  return out;
}

}  // namespace
}  // namespace sandstream::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandstream;
  using namespace sandstream::fuzz;
  namespace http = boost::beast::http;  // Beast's, not sandstream::http
  ApiWorld& world = World();

  http::request<http::string_body> req{http::verb::get, "/v1/sandboxes/sb_fuzz/exec/ws", 11};
  req.set(http::field::host, "localhost");
  req.set(http::field::upgrade, "websocket");
  req.set(http::field::connection, "upgrade");
  req.set(http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
  req.set(http::field::sec_websocket_version, "13");
  api::Context ctx = world.MakeContext(req);

  beast::test::stream server(world.io);
  beast::test::stream client(world.io);
  server.connect(client);
  websocket::stream<beast::test::stream&> ws(server);
  ws.read_message_max(api::WebSocket::kMaxMessage);
  beast::error_code ec;
  ws.accept(req, ec);
  FUZZ_CHECK(!ec);
  if (size > 0 && (data[0] & 1) != 0) {
    FuzzedDataProvider in(data + 1, size - 1);
    server.append(Frames(in));
  } else if (size > 0) {
    server.append(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  }
  server.close_remote();
  beast::flat_buffer buffer;
  for (;;) {
    buffer.clear();
    ws.read(buffer, ec);
    if (ec) break;
    FUZZ_CHECK(buffer.size() <= api::WebSocket::kMaxMessage);
    const std::string message = beast::buffers_to_string(buffer.data());
    AsTerminal(message, ws.got_binary());
    AsExec(ctx, message, ws.got_binary());
  }
  return 0;
}
