// The egress resolver's DNS messages (net/dns.h) from bytes a sandbox or an upstream could send.
// The input is one or two messages framed as over TCP (a 2-byte length first; the rest when it
// does not fit): the first is read as a query and as an upstream's answer to its own question,
// the second as the answer to chasing the first's CNAME. glibc's libresolv is the oracle.
#include <arpa/nameser.h>
#include <resolv.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "check.h"
#include "net/dns.h"

namespace sandstream::net::dns {
namespace {

constexpr uint32_t kMaxTtl = 300;

// The next TCP-framed message of `in`.
std::vector<uint8_t> NextMessage(std::span<const uint8_t>& in) {
  if (in.size() < 2) {
    in = {};
    return {};
  }
  const size_t len = std::min<size_t>(static_cast<size_t>(in[0] << 8 | in[1]), in.size() - 2);
  std::vector<uint8_t> out(in.begin() + 2, in.begin() + 2 + static_cast<ptrdiff_t>(len));
  in = in.subspan(2 + len);
  return out;
}

// The question of a message read the simple way: uncompressed labels from offset 12, lowercase,
// dotted. "" when it is not that simple (then ReadAnswer sees a question that is not ours).
struct Question {
  std::string name;
  uint16_t type = 0;
};
Question SimpleQuestion(std::span<const uint8_t> m) {
  Question q;
  size_t at = kHeaderSize;
  while (at < m.size() && m[at] != 0) {
    const size_t len = m[at];
    if (len > 63 || at + 1 + len > m.size()) return {};
    if (!q.name.empty()) q.name += '.';
    for (size_t i = at + 1; i <= at + len; ++i) {
      const char c = static_cast<char>(m[i]);
      q.name += c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    }
    at += 1 + len;
  }
  if (at + 3 > m.size()) return {};
  q.type = static_cast<uint16_t>(m[at + 1] << 8 | m[at + 2]);
  return q;
}

// What libresolv makes of a message: every record of every section, or nullopt.
struct Parsed {
  ns_msg msg;
  std::vector<ns_rr> records[ns_s_max];
};
std::optional<Parsed> Resolv(std::span<const uint8_t> m) {
  Parsed p;
  if (ns_initparse(m.data(), static_cast<int>(m.size()), &p.msg) != 0) return std::nullopt;
  for (int s = ns_s_qd; s < ns_s_max; ++s) {
    for (int i = 0; i < ns_msg_count(p.msg, static_cast<ns_sect>(s)); ++i) {
      ns_rr rr;
      if (ns_parserr(&p.msg, static_cast<ns_sect>(s), i, &rr) != 0) return std::nullopt;
      p.records[s].push_back(rr);
    }
  }
  return p;
}

// Whether libresolv prints `name` as it is (it escapes the rest as \DDD or \.).
bool Printable(std::string_view name) {
  return std::all_of(name.begin(), name.end(),
                     [](char c) {
                       return c > 0x20 && c < 0x7f &&
                              std::string_view(".\\\"();@$").find(c) == std::string_view::npos;
                     }) ||
         name.empty();
}
std::string Lower(std::string s) {
  for (char& c : s) c = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  return s;
}

void CheckQuery(const std::vector<uint8_t>& msg) {
  const ParsedQuery p = ParseQuery(msg);
  if (!p.query) {
    FUZZ_CHECK(p.rcode == Rcode::kFormErr || p.rcode == Rcode::kNotImp);
    FUZZ_CHECK(!p.reason.empty());
    const std::vector<uint8_t> reply = HeaderOnlyReply(msg, p.rcode);
    const bool answerable = msg.size() >= kHeaderSize && (msg[2] & 0x80) == 0;
    FUZZ_CHECK(reply.size() == (answerable ? kHeaderSize : 0));
    if (answerable) {
      FUZZ_CHECK(reply[0] == msg[0] && reply[1] == msg[1]);
      FUZZ_CHECK(Resolv(reply).has_value());
    }
    return;
  }
  const Query& q = *p.query;
  FUZZ_CHECK(q.qclass == kClassIn);
  FUZZ_CHECK(q.udp_payload >= kClassicUdpSize);
  FUZZ_CHECK(q.question_end <= msg.size());
  FUZZ_CHECK(Lower(q.name) == q.name);

  // The name reads back through MakeQuery.
  auto again = MakeQuery(q.id, q.name, q.type, q.edns ? q.udp_payload : 0);
  FUZZ_CHECK(again.ok());
  const ParsedQuery back = ParseQuery(*again);
  FUZZ_CHECK(back.query.has_value());
  FUZZ_CHECK(back.query->name == q.name && back.query->type == q.type && back.query->id == q.id);
  FUZZ_CHECK(back.query->edns == q.edns && back.query->udp_payload == q.udp_payload);

  // The reply echoes the question and libresolv reads it.
  const std::vector<uint8_t> reply = Reply(msg, q, Rcode::kNxDomain);
  FUZZ_CHECK(reply.size() == q.question_end);
  auto seen = Resolv(reply);
  FUZZ_CHECK(seen.has_value());
  FUZZ_CHECK(ns_msg_id(seen->msg) == q.id);
  FUZZ_CHECK(ns_msg_getflag(seen->msg, ns_f_rcode) == ns_r_nxdomain);
  FUZZ_CHECK(seen->records[ns_s_qd].size() == 1 && seen->records[ns_s_an].empty());
  const ns_rr& question = seen->records[ns_s_qd][0];
  FUZZ_CHECK(ns_rr_type(question) == q.type);
  if (Printable(q.name)) {
    FUZZ_CHECK(Lower(ns_rr_name(question)) == (q.name.empty() ? "." : q.name));
  }
  // A reply is already as short as TruncateForUdp makes it.
  std::vector<uint8_t> cut = reply;
  FUZZ_CHECK(TruncateForUdp(cut, kHeaderSize));
  FUZZ_CHECK(cut.size() == reply.size());

  // An exact pattern of the name matches it; the pattern of its subdomains does not.
  if (auto exact = NamePattern::Parse(q.name); exact.ok()) {
    FUZZ_CHECK(exact->Matches(q.name));
    FUZZ_CHECK(NamePattern::Parse(exact->text()).value() == *exact);
    if (auto sub = NamePattern::Parse("*." + q.name); sub.ok()) {
      FUZZ_CHECK(!sub->Matches(q.name));
      FUZZ_CHECK(sub->Matches("x." + q.name));
      const std::span<const NamePattern> subs(&*sub, 1), exacts(&*exact, 1);
      FUZZ_CHECK(!NameAllowed(q.name, subs, {}));
      FUZZ_CHECK(NameAllowed("x." + q.name, subs, exacts));
      FUZZ_CHECK(!NameAllowed(q.name, exacts, exacts));  // deny wins
    }
  }
}

// What ReadAnswer accepted, libresolv reads too, with the same A records and clamped TTLs.
void CheckAccepted(const std::vector<uint8_t>& m, const Answer& answer, std::string_view qname) {
  FUZZ_CHECK(!answer.chain.empty() && answer.chain.front() == Lower(std::string(qname)));
  FUZZ_CHECK(answer.chain.size() <= 17);
  FUZZ_CHECK(answer.unresolved_cname.empty() || answer.unresolved_cname == answer.chain.back());
  auto seen = Resolv(m);
  FUZZ_CHECK(seen.has_value());
  std::vector<uint32_t> addresses;
  for (const ns_rr& rr : seen->records[ns_s_an]) {
    FUZZ_CHECK(ns_rr_ttl(rr) <= kMaxTtl);
    if (ns_rr_type(rr) == ns_t_a && ns_rr_class(rr) == ns_c_in) {
      FUZZ_CHECK(ns_rr_rdlen(rr) == 4);
      const uint8_t* p = ns_rr_rdata(rr);
      addresses.push_back(uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]);
    }
  }
  for (const ARecord& a : answer.a) {
    FUZZ_CHECK(a.ttl <= kMaxTtl);
    FUZZ_CHECK(std::find(addresses.begin(), addresses.end(), a.address) != addresses.end());
  }
}

void CheckAnswer(const std::vector<uint8_t>& original, const std::vector<uint8_t>& chased) {
  if (original.size() < 2) return;
  const uint16_t id = static_cast<uint16_t>(original[0] << 8 | original[1]);
  const Question q = SimpleQuestion(original);
  std::vector<uint8_t> m = original;
  auto answer = ReadAnswer(m, id, q.name, q.type, kMaxTtl);
  if (!answer.ok()) {
    FUZZ_CHECK(m == original);  // refused: untouched
    return;
  }
  std::vector<uint8_t> other_id = original;
  FUZZ_CHECK(!ReadAnswer(other_id, static_cast<uint16_t>(id ^ 1), q.name, q.type, kMaxTtl).ok());
  if (answer->truncated) {
    FUZZ_CHECK(m == original && answer->a.empty());
    return;
  }
  CheckAccepted(m, *answer, q.name);
  // Reading it again changes nothing.
  const std::vector<uint8_t> clamped = m;
  auto again = ReadAnswer(m, id, q.name, q.type, kMaxTtl);
  FUZZ_CHECK(again.ok() && m == clamped);
  FUZZ_CHECK(again->a == answer->a && again->chain == answer->chain);

  std::vector<uint8_t> cut = m;
  if (TruncateForUdp(cut, kClassicUdpSize)) {
    FUZZ_CHECK(cut.size() <= m.size() && (cut[2] & 0x02) != 0);
    FUZZ_CHECK(Resolv(cut).has_value());
  }

  if (answer->unresolved_cname.empty() || q.type != kTypeA) return;
  std::vector<uint8_t> second = chased;
  if (second.size() >= 2) {
    const uint16_t chased_id = static_cast<uint16_t>(second[0] << 8 | second[1]);
    (void)ReadAnswer(second, chased_id, answer->unresolved_cname, kTypeA, kMaxTtl);
  }
  std::vector<uint8_t> whole = m;
  auto appended = AppendChased(whole, second, answer->unresolved_cname, kMaxTtl);
  if (!appended.ok()) {
    FUZZ_CHECK(whole == m);
    return;
  }
  FUZZ_CHECK(whole.size() <= 65535);
  auto combined = ReadAnswer(whole, id, q.name, kTypeA, kMaxTtl);
  FUZZ_CHECK(combined.ok());
  CheckAccepted(whole, *combined, q.name);
  FUZZ_CHECK(combined->chain.size() >= answer->chain.size());
  for (const ARecord& a : answer->a) {
    FUZZ_CHECK(std::find(combined->a.begin(), combined->a.end(), a) != combined->a.end());
  }
}

}  // namespace
}  // namespace sandstream::net::dns

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandstream::net::dns;
  std::span<const uint8_t> in(data, size);
  const std::vector<uint8_t> first = NextMessage(in);
  const std::vector<uint8_t> second = NextMessage(in);
  CheckQuery(first);
  CheckAnswer(first, second);
  return 0;
}
