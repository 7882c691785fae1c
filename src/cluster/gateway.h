// sandstreamd as a gateway: stateless, in front of nodes. Every request about one sandbox goes
// to the node its id names (sb_{node}_{hex}), and so does the host form of a preview URL, with
// no table to look up: the request's head is rewritten (Connection: close, X-Forwarded-*) and
// both directions are then relayed as they come (http/relay.h), so streams, uploads and
// WebSockets pass unbuffered and a node's flow control reaches the client as TCP backpressure.
// A new sandbox goes to the less loaded of two nodes with room (Members::Candidates), the next
// one tried if a node refuses; the list of sandboxes is every node's, merged. Credentials are
// passed on and checked by the nodes, which hold them; a body the gateway reads itself (a
// create's, a pull's) is read only once a node has accepted the credential.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "base/async.h"
#include "base/clock.h"
#include "base/result.h"
#include "cluster/members.h"
#include "http/listener.h"
#include "http/peer_rate.h"

namespace sandstream::cluster {

struct GatewayOptions {
  std::string preview_domain = "localhost";
  uint64_t max_body_bytes = 1u << 20;  // what a create's body may be (it is kept to retry)
  std::chrono::seconds idle_connection{120};
  SteadyClock::duration write_timeout = std::chrono::seconds(60);
  SteadyClock::duration connect_timeout = std::chrono::seconds(5);
  // How long a node may take to create a sandbox (or list its own).
  SteadyClock::duration node_timeout = std::chrono::seconds(120);
  // The nodes keep tenants and keys in etcd (the gateway reads membership there): a change to
  // them may go to any node.
  bool shared_tenants = false;
  // The admin key, which GET /metrics and a detailed GET /healthz ask for; empty: the gateway
  // has no /metrics.
  std::string api_key;
  size_t max_connections = 12000;  // client connections open at once; past it a 503, closed
};

// What the gateway does with a request, from its head alone.
struct GatewayRoute {
  enum Kind {
    kHealth,     // GET /healthz: the gateway's own, with its view of the nodes
    kMetrics,    // GET /metrics: the gateway's own (the admin key)
    kList,       // GET /v1/sandboxes (E2B: GET /v2/sandboxes): every node's, merged
    kTemplates,  // GET /v1/templates: every node's, merged (one each by name)
    kVolumes,    // GET /v1/volumes (E2B: GET /volumes): every node's, merged
    kTemplate,   // GET /v1/templates/{name}: a node that has it
    kEveryNode,  // a template pulled (JSON) or deleted: on every node, the answers merged
    kCreate,     // POST /v1/sandboxes (E2B: POST /v2/sandboxes): placed on a node
    kSandbox,    // about one sandbox, or volume: to the node its id names
    kAnyNode,    // the same on every node (the console; tenants in etcd): any node
    kSignedUrl,  // E2B's signed /files URL, no sandbox named: the node whose sandbox made it
    kNotHere,    // changes what each node holds alone (tenants without etcd): not served
  } kind;
  std::string sandbox_id;  // kSandbox
  bool e2b = false;        // E2B's wire: its error shape, its list shape
  std::string name = "";   // kTemplate
};
GatewayRoute RouteOf(const boost::beast::http::request_header<>& req,
                     const std::string& preview_domain, bool shared_tenants = false);
// The name of a route's kind, as the gateway's metrics count requests by it.
const char* RouteName(GatewayRoute::Kind kind);

struct Leg;  // one node's part of a request sent to every node (gateway_fanout.cc)

class Gateway {
 public:
  Gateway(boost::asio::any_io_executor ex, Members& members, GatewayOptions options);

  Result<boost::asio::ip::tcp::endpoint> Listen(const std::string& listen);
  boost::asio::awaitable<void> Run();
  void StopAccepting();
  boost::asio::awaitable<bool> SessionsEnded(SteadyClock::duration within) {
    return listener_.Join(within);
  }

 private:
  boost::asio::awaitable<void> Session(boost::asio::ip::tcp::socket socket);
  // Answers a connection past max_connections with a 503 and closes it.
  boost::asio::awaitable<void> RefuseConnection(boost::asio::ip::tcp::socket socket);
  // Whether a node accepts the request's credential, asked from its head alone before its body
  // is read: if not, the node's refusal has been answered. A credential a node accepted is
  // not asked about again for a few seconds.
  boost::asio::awaitable<bool> Admitted(boost::beast::tcp_stream& client,
                                        const boost::beast::http::request_header<>& req,
                                        const GatewayRoute& route);
  // A node a request may go to: its id and address (copied: membership may change meanwhile).
  struct Target {
    std::string node;
    HostPort address;
  };
  // The node that holds `sandbox_id`, or none and why not.
  std::vector<Target> NodeFor(const std::string& sandbox_id, std::optional<Error>& refusal) const;
  // Every node up, least loaded first, for what any node answers alike.
  std::vector<Target> ByLoad(std::optional<Error>& refusal) const;
  static Error NotServed(const boost::beast::http::request_header<>& req);
  // Relays the request to the first of `to` that takes a connection (nothing reaches a node
  // that refuses one, so the next may have it). True when the client's connection is kept
  // for its next request.
  boost::asio::awaitable<bool> Pass(
      boost::beast::tcp_stream& client, boost::beast::flat_buffer& buffer,
      boost::beast::http::request_parser<boost::beast::http::empty_body>& parser,
      const GatewayRoute& route, std::vector<Target> to);
  // Reads the body whole (it may go to several nodes): the request, or none when it has been
  // answered (too large) or the client has gone.
  boost::asio::awaitable<
      std::optional<boost::beast::http::request<boost::beast::http::string_body>>>
  ReadWhole(boost::beast::tcp_stream& client, boost::beast::flat_buffer& buffer,
            boost::beast::http::request_parser<boost::beast::http::empty_body>& parser,
            const GatewayRoute& route);
  // A signed file URL: every node is asked which of its sandboxes made it (the admin key), and
  // the request goes to that one's node, naming it. True when the connection is kept (Pass).
  boost::asio::awaitable<bool> SignedUrl(
      boost::beast::tcp_stream& client, boost::beast::flat_buffer& buffer,
      boost::beast::http::request_parser<boost::beast::http::empty_body>& parser);
  boost::asio::awaitable<void> Create(
      boost::beast::tcp_stream& client, boost::beast::flat_buffer& buffer,
      boost::beast::http::request_parser<boost::beast::http::empty_body>& parser,
      const GatewayRoute& route);
  // One node's answer to a call the gateway made itself.
  struct NodeAnswer {
    std::string node;
    Result<boost::beast::http::response<boost::beast::http::string_body>> answer = Error{};
  };
  // `call` made to every node up at once; their answers in `members_` order.
  // The node a new sandbox's volumes (`body`'s volumes, E2B's volumeMounts) live on, if it
  // names any: the one a volume's id names, else the one that answers for its name. An error
  // when they live on different nodes.
  boost::asio::awaitable<Result<std::optional<std::string>>> VolumesHome(
      const boost::beast::http::request_header<>& req, const boost::json::value& body,
      const GatewayRoute& route, const std::string& peer);
  boost::asio::awaitable<std::vector<NodeAnswer>> CallEvery(
      boost::beast::http::request<boost::beast::http::string_body> call,
      SteadyClock::duration timeout);
  // Every node's list (sandboxes, or templates), merged.
  boost::asio::awaitable<void> List(boost::beast::tcp_stream& client,
                                    const boost::beast::http::request_header<>& req,
                                    const GatewayRoute& route);
  // A change made on every node (a template pulled or imported, or deleted), their answers
  // merged; a pull's or an import's progress, asked for as events, every node's as it comes.
  boost::asio::awaitable<void> Everywhere(
      boost::beast::tcp_stream& client, boost::beast::flat_buffer& buffer,
      boost::beast::http::request_parser<boost::beast::http::empty_body>& parser,
      const GatewayRoute& route);
  // An image archive's body to every leg as it arrives (nothing kept whole): false when the
  // client left or its body broke off (then answered here, or not at all).
  boost::asio::awaitable<bool> SendEverywhere(
      boost::beast::tcp_stream& client, boost::beast::flat_buffer& buffer,
      boost::beast::http::request_parser<boost::beast::http::empty_body>& parser,
      std::vector<Leg>& legs);
  // Every leg's stream of events as one: progress as it comes, tagged with its node, then one
  // last event (the template, with where it is, or the error).
  boost::asio::awaitable<void> MergeEvents(boost::beast::tcp_stream& client,
                                           std::vector<Leg>& legs);
  // Every node's answer to one change, as one: the first node's template (with `nodes` and
  // `failed_nodes`), a delete refused somewhere (with X-Sandstream-Done-Nodes), or why nowhere.
  boost::beast::http::response<boost::beast::http::string_body> Merged(
      bool pull, std::vector<NodeAnswer>& answers);
  // The nodes that have template `name`, lightest first, then the rest.
  std::vector<Target> WithTemplate(const std::string& name, std::optional<Error>& refusal) const;
  boost::asio::awaitable<void> Health(boost::beast::tcp_stream& client,
                                      const boost::beast::http::request_header<>& req);
  boost::asio::awaitable<void> Metrics(boost::beast::tcp_stream& client,
                                       const boost::beast::http::request_header<>& req);
  // The gateway's own error answer (counted by code, logged).
  boost::beast::http::response<boost::beast::http::string_body> Refusal(const Error& error,
                                                                        bool e2b);
  // Answers `error` from the gateway itself (counted by code).
  boost::asio::awaitable<void> Refuse(boost::beast::tcp_stream& client, unsigned version,
                                      const Error& error, bool e2b);

  boost::asio::any_io_executor ex_;
  Members& members_;
  GatewayOptions options_;
  sandstream::http::Listener listener_;
  // Credentials a node accepted (by SHA-256), until when that is taken as still so.
  std::map<std::string, SteadyTime, std::less<>> admitted_;
  // Signed-URL lookups (each asks every node) by client address.
  sandstream::http::PeerRate signature_scans_{sandstream::http::kSignatureScansPerSecond,
                                              sandstream::http::kSignatureScanBurst};
  // What GET /metrics tells.
  struct Counts {
    std::map<std::string, uint64_t, std::less<>> requests;    // by route kind
    std::map<std::string, uint64_t, std::less<>> refusals;    // answered here, by error code
    std::map<std::string, uint64_t, std::less<>> placements;  // sandboxes made, by node
    uint64_t to_node = 0;                                     // bytes relayed each way
    uint64_t to_client = 0;
    int64_t connections = 0;  // client connections open
  } counts_;
};

}  // namespace sandstream::cluster
