// The HTTP pieces the gateway's files share (gateway_http.h).
#include "cluster/gateway_http.h"

#include <utility>

#include <boost/beast/http.hpp>
#include <boost/json.hpp>

namespace sandstream::cluster {

bool HopByHop(const http::fields::value_type& field) {
  return field.name() == http::field::connection || field.name() == http::field::keep_alive ||
         field.name() == http::field::proxy_connection || field.name() == http::field::te;
}

std::string PeerAddress(const tcp::socket& socket) {
  boost::system::error_code ec;
  const auto peer = socket.remote_endpoint(ec);
  return ec ? std::string() : peer.address().to_string();
}

// The request as a whole message, for the calls the gateway makes itself (create, list).
http::request<http::string_body> NodeRequest(const http::request_header<>& req, std::string body,
                                             const std::string& peer) {
  http::request<http::string_body> out{req.method(), req.target(), 11};
  for (const auto& field : req) {
    if (HopByHop(field) || field.name() == http::field::host ||
        field.name() == http::field::content_length ||
        field.name() == http::field::transfer_encoding || field.name() == http::field::expect) {
      continue;
    }
    out.insert(field.name_string(), field.value());
  }
  if (!peer.empty()) out.set("X-Forwarded-For", peer);
  if (req.find(http::field::host) != req.end()) {
    out.set("X-Forwarded-Host", req[http::field::host]);
  }
  out.body() = std::move(body);
  return out;
}

asio::awaitable<void> Answer(beast::tcp_stream& client, unsigned version, http::status status,
                             std::string body, const http::fields* from,
                             std::string_view content_type) {
  http::response<http::string_body> res{status, version};
  if (from) {
    for (const auto& field : *from) {
      if (HopByHop(field) || field.name() == http::field::content_length ||
          field.name() == http::field::transfer_encoding) {
        continue;
      }
      res.insert(field.name_string(), field.value());
    }
  } else {
    res.set(http::field::server, "sandstreamd");
    res.set(http::field::content_type, content_type);
  }
  res.keep_alive(false);
  res.body() = std::move(body);
  res.prepare_payload();
  client.expires_after(std::chrono::seconds(60));
  auto [ec, n] = co_await http::async_write(client, res, kTuple);
  (void)ec;
  (void)n;
}

std::optional<std::string> ErrorMessageOf(std::string_view body) {
  boost::system::error_code ec;
  const json::value v = json::parse(body, ec);
  const json::value* error = !ec && v.is_object() ? v.as_object().if_contains("error") : nullptr;
  const json::value* message =
      error && error->is_object() ? error->as_object().if_contains("message") : nullptr;
  if (!message || !message->is_string()) return std::nullopt;
  return std::string(message->as_string());
}

Error Unreachable(std::string_view node, std::string_view sandbox_id, std::string_view why) {
  const std::string holds =
      sandbox_id.empty() ? "" : ", which holds sandbox " + std::string(sandbox_id) + ",";
  return Error{ErrorCode::kNodeUnreachable,
               "node " + std::string(node) + holds + " is unreachable: " + std::string(why)};
}

}  // namespace sandstream::cluster
