// What the gateway's files (gateway*.cc) share: a node's request made from a client's, the one
// way the gateway writes an answer to a client, and the error about a node it cannot reach.
// For those files only; the namespace aliases below are theirs too.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/fwd.hpp>

#include "base/result.h"
#include "cluster/http_client.h"

namespace sandstream::cluster {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace json = boost::json;
using tcp = boost::asio::ip::tcp;

inline constexpr auto kTuple = boost::asio::as_tuple(boost::asio::use_awaitable);
inline constexpr auto kBodyReadTimeout = std::chrono::seconds(60);
inline constexpr auto kListTimeout = std::chrono::seconds(10);

// Connection, Keep-Alive, Proxy-Connection and TE: this hop's, never passed on.
bool HopByHop(const http::fields::value_type& field);
// The client's address, or "" once it is gone.
std::string PeerAddress(const boost::asio::ip::tcp::socket& socket);
// The request as a whole message, for the calls the gateway makes itself (create, list).
http::request<http::string_body> NodeRequest(const http::request_header<>& req, std::string body,
                                             const std::string& peer);
// Writes one whole answer; the connection ends with it. `from`: a node's answer's fields, passed
// on but hop-by-hop and framing ones.
boost::asio::awaitable<void> Answer(boost::beast::tcp_stream& client, unsigned version,
                                    http::status status, std::string body,
                                    const http::fields* from = nullptr,
                                    std::string_view content_type = "application/json");
// The message of a node's error answer ({"error": {"code", "message"}}), if it is one.
std::optional<std::string> ErrorMessageOf(std::string_view body);
// A node that cannot be reached, and the sandbox the request was for ("" for none).
Error Unreachable(std::string_view node, std::string_view sandbox_id, std::string_view why);

}  // namespace sandstream::cluster
