// A node as the cluster sees it: its id (which every sandbox id it makes carries), where it
// answers, and its load. Nodes publish it (etcd, and GET /healthz); gateways place and route
// by it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "base/result.h"

namespace sandstream::cluster {

struct NodeRecord {
  std::string id;
  std::string address;  // host:port gateways reach its API at
  int64_t sandboxes = 0;
  int64_t max_sandboxes = 0;
  int64_t memory_mb = 0;           // committed: the sum of its sandboxes' memory limits
  int64_t memory_mb_capacity = 0;  // what it may commit
  int64_t sandbox_memory_mb = 0;   // what a sandbox of default limits commits there
  int64_t cpu_percent = 0;         // committed, 100 = one core
  int64_t cpu_percent_capacity = 0;
  std::vector<std::string> templates;
  bool stopping = false;

  boost::json::object Json() const;
  static Result<NodeRecord> FromJson(std::string_view text);
  bool operator==(const NodeRecord&) const = default;

  bool HasRoom() const { return !stopping && sandboxes < max_sandboxes; }
  bool HasTemplate(std::string_view name) const;
  // The share of its capacity in use, the fuller of sandboxes and memory: 0 to 1 (or more).
  double Load(int64_t pending = 0) const;
};

// Where nodes keep their records in etcd, under the cluster's prefix ("/sandstream/"): one key
// per node, {prefix}nodes/{id}.
inline std::string NodesPrefix(const std::string& prefix) {
  return prefix + "nodes/";
}
inline std::string NodeKey(const std::string& prefix, const std::string& id) {
  return NodesPrefix(prefix) + id;
}

// A sandbox made on a node has the id sb_{node}_{16 hex} (Service::CreateSandbox), a volume
// vol_{node}_{16 hex} (Volumes::Create).
// Whether `id` may name a node: [a-z0-9][a-z0-9-]{0,39}, so it fits a DNS label with the rest
// of a preview host.
bool IsValidNodeId(std::string_view id);

// The node a sandbox's or a volume's id names; nullopt for an id that names none (made outside
// a cluster, a volume's name, or not such an id at all).
std::optional<std::string_view> NodeOfSandbox(std::string_view sandbox_id);

}  // namespace sandstream::cluster
