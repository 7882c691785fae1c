// The HTTP front: accepts connections, reads requests, authenticates, dispatches to routes,
// and on shutdown ends every open stream with an `error` event before closing it.
#pragma once

#include <chrono>
#include <functional>
#include <list>
#include <map>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/json/object.hpp>

#include "api/http.h"
#include "base/async.h"
#include "base/clock.h"
#include "base/result.h"
#include "http/listener.h"
#include "http/peer_rate.h"
#include "service/access.h"

namespace sandstream::api {

struct ServerOptions {
  std::string api_key;
  // Who a credential is (tenants' keys, scoped tokens); null: the api_key alone, as the admin.
  const Access* access = nullptr;
  uint64_t max_body_bytes = 1u << 20;
  uint64_t max_stdin_bytes = 16u << 20;
  uint64_t max_file_bytes = 1u << 30;            // file uploads (routes with stream_body)
  uint64_t max_image_bytes = uint64_t{4} << 30;  // image archives (POST /v1/templates)
  std::chrono::seconds keepalive{15};
  std::chrono::seconds idle_connection{120};
  // A write that makes no progress for this long ends its connection (a client that stopped
  // reading); a merely slow client always makes some.
  SteadyClock::duration write_timeout = std::chrono::seconds(60);
  size_t max_connections = 12000;  // past it a new connection gets a 503 and is closed
  std::chrono::seconds terminal_idle{300};
  uint64_t terminal_replay_bytes = 1u << 20;
  std::string web_dir;  // the console's static files; empty: no console
  // Exposed ports answer at the host {port}-{sandbox id}.{preview_domain} (api/routes/ports.cc).
  std::string preview_domain = "localhost";
  // How clients reach the daemon ("https://sandstream.example.com"), for the URLs it hands out;
  // empty: http:// and the request's Host.
  std::string public_url;
  // /metrics has each sandbox's latest CPU, memory and disk sample (a series per sandbox).
  bool metrics_per_sandbox = false;
  // Template names E2B's SDKs ask for ("code-interpreter-v1"), as sandstream's.
  std::map<std::string, std::string> e2b_template_aliases;
  // In a cluster: this node's record (id, address, load) for GET /healthz, where a gateway
  // without etcd reads it. Unset: not in a cluster.
  std::function<boost::json::object()> node_record;
  // In a cluster: reads the cluster's tenants and keys again, for a credential this node does
  // not know (yet: a key made through another node a moment ago). Unset: not shared.
  std::function<boost::asio::awaitable<void>()> refresh_access;
};

// A live streaming response (or relay), so shutdown, or the end of the credential it was opened
// with, can reach it.
struct StreamHandle {
  std::function<void()> wake;
  bool stopping = false;
  std::string token;            // the scoped token it was opened with; empty for a key
  std::string key;              // the tenant key it stands on (Principal::key); empty: none
  std::optional<Error> reason;  // why it was stopped, when not for the daemon's shutdown

  // Remembers the credentials of `p` that can end (a scoped token, a tenant's key).
  void StandOn(const Principal& p) {
    if (p.kind == Principal::Kind::kToken && !p.derived) token = p.credential;
    key = p.key;
  }
};

struct RouteMatch;

class Server {
 public:
  Server(boost::asio::any_io_executor ex, Service& service, ServerOptions options);

  // Binds `listen` ("host:port", port 0 picks one) and returns the bound endpoint.
  Result<boost::asio::ip::tcp::endpoint> Listen(const std::string& listen);
  boost::asio::awaitable<void> Run();
  // Stops accepting and tells every stream to end; their sessions then close. Connections
  // idle between requests are closed at once: a keep-alive client retries elsewhere.
  void StopAccepting();
  void EndStreams();
  // Closes every connection's socket, whatever it is doing (a write to a client that stopped
  // reading): the last step of shutdown, after the grace.
  void CloseConnections();
  size_t open_sessions() const { return listener_.running(); }
  // Until every connection's session has ended, for at most `within`; false if some remain.
  boost::asio::awaitable<bool> SessionsEnded(SteadyClock::duration within) {
    return listener_.Join(within);
  }

  const ServerOptions& options() const { return options_; }
  std::list<StreamHandle*>::iterator AddStream(StreamHandle* h);
  void RemoveStream(std::list<StreamHandle*>::iterator it);
  bool stopping() const { return listener_.stopping(); }
  // A request of `tenant` (a `stream` or not) within its quotas: requests_per_second, streams.
  // Routes that admit their callers themselves (envd's) ask here once they know the tenant.
  std::optional<Error> AdmitTenant(const std::string& tenant, bool stream);
  // Signed-URL lookups that check every sandbox, by client address.
  sandstream::http::PeerRate& signature_scans() { return signature_scans_; }

 private:
  // After the credential, before the body: a sandbox the route names that exists but not for
  // the request's principal (its 404), and the tenant's requests_per_second and streams quotas
  // (429).
  std::optional<Error> Admission(const RouteMatch& match);

  boost::asio::awaitable<void> Session(boost::asio::ip::tcp::socket socket);
  // Every second: streams opened with a token that has expired or was revoked, or standing on
  // a key that was revoked, are ended.
  boost::asio::awaitable<void> EndStreamsOfDeadTokens();
  // Answers a connection past max_connections with a 503 and closes it.
  boost::asio::awaitable<void> Refuse(boost::asio::ip::tcp::socket socket);
  // Answers `error` on a connection whose request was not read, then reads and drops what the
  // client still sends for at most `drain`; the caller closes it.
  boost::asio::awaitable<void> TurnAway(boost::beast::tcp_stream& stream, const Error& error,
                                        SteadyClock::duration drain);
  // Answers the request: `error` if set, else the route's handler, with sandbox `wakes` (if
  // any) resumed first and kept awake meanwhile.
  boost::asio::awaitable<void> Handle(Context& ctx, const struct Route* route,
                                      const std::string& wakes, std::optional<Error> error);

  boost::asio::any_io_executor ex_;
  Service& service_;
  ServerOptions options_;
  std::list<StreamHandle*> streams_;
  struct Rate {
    double tokens = 0;
    SteadyTime refilled{};
  };
  std::map<std::string, Rate, std::less<>> rates_;  // by tenant, with a rate quota
  sandstream::http::PeerRate signature_scans_{sandstream::http::kSignatureScansPerSecond,
                                              sandstream::http::kSignatureScanBurst};
  std::list<boost::beast::tcp_stream*> connections_;
  sandstream::http::Listener listener_;
  uint64_t next_request_ = 0;
};

}  // namespace sandstream::api
