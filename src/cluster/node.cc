#include "cluster/node.h"

#include <algorithm>

#include <boost/json.hpp>

namespace sandstream::cluster {
namespace json = boost::json;

namespace {

int64_t IntField(const json::object& o, std::string_view name) {
  const json::value* v = o.if_contains(name);
  return v && v->is_int64() ? v->as_int64() : 0;
}

}  // namespace

json::object NodeRecord::Json() const {
  json::array names;
  for (const auto& t : templates) names.emplace_back(t);
  return {{"id", id},
          {"address", address},
          {"sandboxes", sandboxes},
          {"max_sandboxes", max_sandboxes},
          {"memory_mb", memory_mb},
          {"memory_mb_capacity", memory_mb_capacity},
          {"sandbox_memory_mb", sandbox_memory_mb},
          {"cpu_percent", cpu_percent},
          {"cpu_percent_capacity", cpu_percent_capacity},
          {"templates", std::move(names)},
          {"stopping", stopping}};
}

Result<NodeRecord> NodeRecord::FromJson(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return Error{ErrorCode::kInvalidJson, "a node record is not JSON"};
  const json::object& o = v.as_object();
  NodeRecord r;
  if (const json::value* id = o.if_contains("id"); id && id->is_string()) {
    r.id = std::string(id->as_string());
  }
  if (!IsValidNodeId(r.id))
    return Error{ErrorCode::kInvalidRequest, "a node record has no valid id"};
  if (const json::value* a = o.if_contains("address"); a && a->is_string()) {
    r.address = std::string(a->as_string());
  }
  r.sandboxes = IntField(o, "sandboxes");
  r.max_sandboxes = IntField(o, "max_sandboxes");
  r.memory_mb = IntField(o, "memory_mb");
  r.memory_mb_capacity = IntField(o, "memory_mb_capacity");
  r.sandbox_memory_mb = IntField(o, "sandbox_memory_mb");
  r.cpu_percent = IntField(o, "cpu_percent");
  r.cpu_percent_capacity = IntField(o, "cpu_percent_capacity");
  if (const json::value* t = o.if_contains("templates"); t && t->is_array()) {
    for (const json::value& name : t->as_array()) {
      if (name.is_string()) r.templates.emplace_back(name.as_string());
    }
  }
  if (const json::value* s = o.if_contains("stopping"); s && s->is_bool())
    r.stopping = s->as_bool();
  return r;
}

bool NodeRecord::HasTemplate(std::string_view name) const {
  return std::find(templates.begin(), templates.end(), name) != templates.end();
}

double NodeRecord::Load(int64_t pending) const {
  const auto share = [](int64_t used, int64_t capacity) {
    return capacity > 0 ? static_cast<double>(used) / static_cast<double>(capacity) : 0.0;
  };
  // A sandbox placed but not yet in the record counts at the default's weight: one sandbox, and
  // the memory of default limits.
  return std::max(share(sandboxes + pending, max_sandboxes),
                  share(memory_mb + pending * sandbox_memory_mb, memory_mb_capacity));
}

bool IsValidNodeId(std::string_view id) {
  if (id.empty() || id.size() > 40 || id.front() == '-') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

std::optional<std::string_view> NodeOfSandbox(std::string_view sandbox_id) {
  if (sandbox_id.starts_with("sb_")) {
    sandbox_id.remove_prefix(3);
  } else if (sandbox_id.starts_with("vol_")) {
    sandbox_id.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const size_t sep = sandbox_id.rfind('_');
  if (sep == std::string_view::npos) return std::nullopt;
  std::string_view node = sandbox_id.substr(0, sep);
  if (!IsValidNodeId(node)) return std::nullopt;
  return node;
}

}  // namespace sandstream::cluster
