// The cluster's pure pieces: node ids in sandbox ids, addresses, node records, the gateway's
// routing from a request's head, and placement over a table of nodes.
#include <gtest/gtest.h>

#include <map>

#include <boost/asio/io_context.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include "cluster/etcd.h"
#include "cluster/gateway.h"
#include "cluster/members.h"
#include "cluster/node.h"

namespace sandstream::cluster {
namespace {

namespace http = boost::beast::http;

TEST(NodeIds, SandboxIdsNameTheirNode) {
  EXPECT_EQ(NodeOfSandbox("sb_n1_6f1c2a9e0b7d4e3a"), "n1");
  EXPECT_EQ(NodeOfSandbox("sb_gke-pool-1_6f1c2a9e0b7d4e3a"), "gke-pool-1");
  EXPECT_EQ(NodeOfSandbox("sb_6f1c2a9e0b7d4e3a"), std::nullopt);  // a daemon on its own
  EXPECT_EQ(NodeOfSandbox("proc_n1_6f1c2a9e0b7d4e3a"), std::nullopt);
  EXPECT_EQ(NodeOfSandbox("sb_N1_6f1c2a9e0b7d4e3a"), std::nullopt);
  EXPECT_EQ(NodeOfSandbox("sb__6f1c2a9e0b7d4e3a"), std::nullopt);
  EXPECT_TRUE(IsValidNodeId("n1"));
  EXPECT_TRUE(IsValidNodeId(std::string(40, 'a')));
  EXPECT_FALSE(IsValidNodeId(std::string(41, 'a')));
  EXPECT_FALSE(IsValidNodeId("-n1"));
  EXPECT_FALSE(IsValidNodeId("n_1"));
  EXPECT_FALSE(IsValidNodeId("n.1"));
  EXPECT_FALSE(IsValidNodeId(""));
}

TEST(Addresses, HostPortAndEndpoints) {
  auto a = ParseHostPort("http://127.0.0.1:2379/");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, "2379");
  auto v6 = ParseHostPort("[::1]:8080");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->text(), "[::1]:8080");
  EXPECT_TRUE(ParseHostPort("etcd.default.svc:2379"));
  EXPECT_FALSE(ParseHostPort("https://etcd:2379"));
  EXPECT_FALSE(ParseHostPort("etcd"));
  EXPECT_FALSE(ParseHostPort("etcd:0"));
  EXPECT_FALSE(ParseHostPort("etcd:65536"));
  EXPECT_FALSE(ParseHostPort("etcd:80x"));
  auto list = ParseEndpoints(" http://a:1, http://b:2 ,");
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].text(), "b:2");
  EXPECT_FALSE(ParseEndpoints("a:1,nope"));
  EXPECT_TRUE(ParseEndpoints("")->empty());
}

NodeRecord Record(std::string id, int64_t sandboxes, int64_t max = 100) {
  NodeRecord r;
  r.id = std::move(id);
  r.address = "127.0.0.1:1";
  r.sandboxes = sandboxes;
  r.max_sandboxes = max;
  r.memory_mb = sandboxes * 10;
  r.memory_mb_capacity = 1000;
  r.sandbox_memory_mb = 10;
  r.templates = {"base"};
  return r;
}

TEST(NodeRecords, RoundTripAndLoad) {
  NodeRecord r = Record("n1", 25);
  r.memory_mb = 500;
  r.cpu_percent = 300;
  r.cpu_percent_capacity = 200;
  auto back = NodeRecord::FromJson(boost::json::serialize(r.Json()));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->id, "n1");
  EXPECT_EQ(back->sandboxes, 25);
  EXPECT_EQ(back->memory_mb, 500);
  EXPECT_EQ(back->templates, std::vector<std::string>{"base"});
  // The fuller of sandboxes and memory.
  EXPECT_DOUBLE_EQ(back->Load(), 0.5);
  EXPECT_DOUBLE_EQ(Record("n1", 25).Load(55), 0.8);
  EXPECT_TRUE(Record("n1", 99).HasRoom());
  EXPECT_FALSE(Record("n1", 100).HasRoom());
  EXPECT_FALSE(NodeRecord::FromJson(R"({"id": "Not_A_Node"})"));
  EXPECT_FALSE(NodeRecord::FromJson("[]"));
}

GatewayRoute Route(http::verb verb, std::string target, std::string host = "gw:8080",
                   std::map<std::string, std::string> fields = {}) {
  http::request_header<> req;
  req.method(verb);
  req.target(target);
  req.set(http::field::host, host);
  for (const auto& [name, value] : fields) req.set(name, value);
  return RouteOf(req, "localhost");
}

TEST(GatewayRoutes, FromTheHeadAlone) {
  EXPECT_EQ(Route(http::verb::get, "/healthz").kind, GatewayRoute::kHealth);
  EXPECT_EQ(Route(http::verb::get, "/metrics").kind, GatewayRoute::kMetrics);
  EXPECT_EQ(Route(http::verb::get, "/v1/sandboxes").kind, GatewayRoute::kList);
  EXPECT_EQ(Route(http::verb::get, "/v1/sandboxes?x=1").kind, GatewayRoute::kList);
  EXPECT_EQ(Route(http::verb::post, "/v1/sandboxes").kind, GatewayRoute::kCreate);
  EXPECT_EQ(Route(http::verb::delete_, "/v1/sandboxes").kind, GatewayRoute::kNotHere);
  auto exec = Route(http::verb::post, "/v1/sandboxes/sb_n2_0123456789abcdef/exec/stream");
  EXPECT_EQ(exec.kind, GatewayRoute::kSandbox);
  EXPECT_EQ(exec.sandbox_id, "sb_n2_0123456789abcdef");
  auto preview =
      Route(http::verb::get, "/index.html", "8000-sb_n3_0123456789abcdef.localhost:8080");
  EXPECT_EQ(preview.kind, GatewayRoute::kSandbox);
  EXPECT_EQ(preview.sandbox_id, "sb_n3_0123456789abcdef");
  auto envd = Route(http::verb::post, "/process.Process/Start", "gw:8080",
                    {{"E2b-Sandbox-Id", "sb_n1_0123456789abcdef"}});
  EXPECT_EQ(envd.kind, GatewayRoute::kSandbox);
  EXPECT_TRUE(envd.e2b);
  auto e2b_create = Route(http::verb::post, "/v2/sandboxes");
  EXPECT_EQ(e2b_create.kind, GatewayRoute::kCreate);
  EXPECT_TRUE(e2b_create.e2b);
  EXPECT_EQ(Route(http::verb::delete_, "/sandboxes/sb_n1_0123456789abcdef").sandbox_id,
            "sb_n1_0123456789abcdef");
  EXPECT_EQ(Route(http::verb::get, "/v1/console.js").kind, GatewayRoute::kAnyNode);
  EXPECT_EQ(Route(http::verb::get, "/").kind, GatewayRoute::kAnyNode);
  EXPECT_EQ(Route(http::verb::get, "/v1/templates").kind, GatewayRoute::kTemplates);
  EXPECT_EQ(Route(http::verb::post, "/v1/templates").kind, GatewayRoute::kEveryNode);
  EXPECT_EQ(Route(http::verb::delete_, "/v1/templates/tiny").kind, GatewayRoute::kEveryNode);
  auto tmpl = Route(http::verb::get, "/v1/templates/tiny");
  EXPECT_EQ(tmpl.kind, GatewayRoute::kTemplate);
  EXPECT_EQ(tmpl.name, "tiny");
  EXPECT_EQ(Route(http::verb::post, "/v1/templates/tiny/x").kind, GatewayRoute::kNotHere);
  EXPECT_EQ(Route(http::verb::post, "/v1/admin/tenants").kind, GatewayRoute::kNotHere);
}

TEST(GatewayRoutes, TenantsInEtcdGoToAnyNode) {
  http::request_header<> req;
  req.method(http::verb::post);
  req.target("/v1/admin/tenants/acme/keys");
  req.set(http::field::host, "gw:8080");
  EXPECT_EQ(RouteOf(req, "localhost", true).kind, GatewayRoute::kAnyNode);
  EXPECT_EQ(RouteOf(req, "localhost", false).kind, GatewayRoute::kNotHere);
  req.target("/v1/usage");
  EXPECT_EQ(RouteOf(req, "localhost", true).kind, GatewayRoute::kNotHere);
}

TEST(Placement, TwoChoicesSpreadEvenly) {
  boost::asio::io_context io;
  Members members(io.get_executor(), {});
  EXPECT_FALSE(members.Candidates(""));  // nobody has joined
  for (const char* id : {"n1", "n2", "n3"}) members.Saw(Record(id, 0, 2000), *ParseHostPort("a:1"));
  std::map<std::string, int> placed;
  for (int i = 0; i < 1000; ++i) {
    auto order = members.Candidates("");
    ASSERT_TRUE(order);
    ASSERT_EQ(order->size(), 3u);
    members.Placed(order->front());
    ++placed[order->front()];
  }
  for (const auto& [node, count] : placed) {
    EXPECT_NEAR(count, 1000.0 / 3, 1000.0 / 3 * 0.1) << node;
  }
}

TEST(Placement, PlacementsCountUntilTheRecordChanges) {
  boost::asio::io_context io;
  Members members(io.get_executor(), {});
  const HostPort at = *ParseHostPort("a:1");
  members.Saw(Record("a", 0, 10), at);
  members.Saw(Record("b", 1, 10), at);
  // Two placed on a since its record was read: it is the fuller, even when its unchanged
  // record is read again (a node rewrites it on every renewal).
  members.Placed("a");
  members.Placed("a");
  members.Saw(Record("a", 0, 10), at);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(members.Candidates("")->front(), "b");
  // Its record now counts them: pending is dropped, not counted twice.
  members.Saw(Record("a", 2, 10), at);
  EXPECT_EQ(members.Find("a")->pending, 0);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(members.Candidates("")->front(), "b");
  members.Saw(Record("b", 3, 10), at);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(members.Candidates("")->front(), "a");
}

TEST(Placement, RoomTemplatesAndTheLessLoadedFirst) {
  boost::asio::io_context io;
  Members members(io.get_executor(), {});
  const HostPort at = *ParseHostPort("a:1");
  members.Saw(Record("full", 100), at);
  NodeRecord busy = Record("busy", 90);
  NodeRecord idle = Record("idle", 0);
  idle.templates = {"base", "gpu"};
  members.Saw(busy, at);
  members.Saw(idle, at);
  for (int i = 0; i < 20; ++i) {
    auto order = members.Candidates("");
    ASSERT_TRUE(order);
    EXPECT_EQ(*order, (std::vector<std::string>{"idle", "busy"}));  // never the full one
  }
  auto gpu = members.Candidates("gpu");
  ASSERT_TRUE(gpu);
  EXPECT_EQ(*gpu, std::vector<std::string>{"idle"});
  // A template no node lists: every node with room, and the nodes' answers decide.
  EXPECT_EQ(members.Candidates("elsewhere")->size(), 2u);
}

}  // namespace
}  // namespace sandstream::cluster
