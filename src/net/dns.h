// The DNS messages of the per-sandbox egress resolver (egress-design §3.6): reads a sandbox's
// queries and an upstream's answers, builds the replies. Pure functions over bytes: no sockets,
// no policy state. Every input is untrusted; every read is bounds-checked and every loop bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace sandstream::net::dns {

enum class Rcode : uint8_t {
  kNoError = 0,
  kFormErr = 1,
  kServFail = 2,
  kNxDomain = 3,
  kNotImp = 4,
  kRefused = 5,
};

inline constexpr uint16_t kTypeA = 1;
inline constexpr uint16_t kTypeCname = 5;
inline constexpr uint16_t kTypeAaaa = 28;
inline constexpr uint16_t kTypeOpt = 41;
inline constexpr uint16_t kTypeSvcb = 64;
inline constexpr uint16_t kTypeHttps = 65;
inline constexpr uint16_t kTypeAny = 255;
inline constexpr uint16_t kClassIn = 1;

inline constexpr size_t kHeaderSize = 12;
// What a UDP client without EDNS takes (RFC 1035 §4.2.1).
inline constexpr size_t kClassicUdpSize = 512;

// A sandbox's query, as ParseQuery accepts it.
struct Query {
  uint16_t id = 0;
  std::string name;  // lowercase (ASCII), dotted, no trailing dot; "" is the root
  uint16_t type = 0;
  uint16_t qclass = 0;  // always kClassIn once accepted
  bool recursion_desired = false;
  bool edns = false;                       // it carried an OPT record
  uint16_t udp_payload = kClassicUdpSize;  // the OPT's size, at least 512; 512 without one
  size_t question_end = 0;                 // offset just past the question
};

// What ParseQuery makes of a message: the query, or the rcode to refuse it with.
struct ParsedQuery {
  std::optional<Query> query;
  Rcode rcode = Rcode::kNoError;  // when !query: kFormErr or kNotImp, for HeaderOnlyReply
  std::string_view reason;        // when !query: what was wrong, for the log (a literal)
};

// Reads a query in the strict subset of §3.6: a 12-byte header with QR=0, OPCODE=0, QDCOUNT=1,
// ANCOUNT=NSCOUNT=0, ARCOUNT<=1 (an OPT with the root as owner); one QNAME without compression
// pointers, labels of 1..63 bytes, at most 255 bytes on the wire, no 0x40/0x80 label types and
// no label holding '.' or NUL (the dotted name would be ambiguous: `evil\.pypi.org`); nothing
// after the question or the OPT. Another opcode or a QCLASS other than IN is kNotImp; anything
// else wrong is kFormErr.
ParsedQuery ParseQuery(std::span<const uint8_t> msg);

// A reply without records to a query ParseQuery accepted from `query`: its header with QR=1,
// AA=0, TC=0, RA=1, RD and CD kept, the given rcode, its question echoed as sent (case and all),
// ANCOUNT=NSCOUNT=ARCOUNT=0. So NXDOMAIN is Reply(..., kNxDomain), NODATA Reply(..., kNoError).
std::vector<uint8_t> Reply(std::span<const uint8_t> query, const Query& q, Rcode rcode);

// The reply to a message ParseQuery refused: its 12-byte header with QR=1, RA=1, the opcode and
// RD kept, the given rcode and every count 0. Empty, meaning send nothing, when fewer than 12
// bytes arrived (that is not DNS) or the message has QR=1 (answering a response could start a
// loop between two resolvers).
std::vector<uint8_t> HeaderOnlyReply(std::span<const uint8_t> msg, Rcode rcode);

// A query with RD=1 for `name` (dotted as in Query::name, "" for the root), as the resolver
// sends upstream to chase a CNAME. With `udp_payload` non-zero it carries an OPT advertising
// that size. Errors (kInvalidRequest) for an empty label, a label over 63 bytes or holding NUL,
// or a name over 255 bytes on the wire.
Result<std::vector<uint8_t>> MakeQuery(uint16_t id, std::string_view name, uint16_t type,
                                       uint16_t udp_payload = 0);

// Sets a message's ID (the resolver's upstream ID out, the client's back). No-op on fewer than
// 2 bytes.
void SetId(std::span<uint8_t> msg, uint16_t id);

// An A record of an answer's CNAME chain.
struct ARecord {
  uint32_t address = 0;  // host byte order, as net/ipv4.h
  uint32_t ttl = 0;      // after clamping
  bool operator==(const ARecord&) const = default;
};

// What an upstream's answer says about the query.
struct Answer {
  Rcode rcode = Rcode::kNoError;   // as the upstream sent it (may be outside the named values)
  bool truncated = false;          // TC: only the question was read (no chain, no A): use TCP
  std::vector<std::string> chain;  // the query name, then each CNAME target in order, lowercase
  std::vector<ARecord> a;          // the class IN A records whose owner is on `chain`
  // The last name of `chain` when the chain has a CNAME, the rcode is NOERROR and no record of
  // the query's type exists for that name (the upstream did not chase it: resolve it with
  // MakeQuery + AppendChased). Empty otherwise, and always for a query of type CNAME.
  std::string unresolved_cname;
};

// Reads an upstream's response to the query (`qname`, `qtype`) sent with `expected_id`, for
// the records to pin. Checks: ID, QR=1, OPCODE=0, QDCOUNT=1, the question echoed (name
// case-insensitively, type, class IN). Unless TC is set, every record of every section is
// framed within the message (names may be compressed, with pointers strictly backwards past the
// header and at most 128 hops; names at most 255 bytes; RDLENGTH in bounds), nothing follows the
// last one, and the only OPT is one in the additional section, owned by the root. In the answer
// section: an A of class IN has RDLENGTH 4, a CNAME's RDATA is exactly one name, no name has a
// label holding '.' or NUL; the CNAME chain from `qname` has at most 16 links, one target per
// name and no loop. Authority and additional records are never read for meaning. On success, every
// answer record's TTL is clamped in place to `max_ttl` (a TTL with the top bit set counts as 0, RFC
// 2181 §8); a truncated response is left as it is. Any failure is an Error (kBadGateway) naming
// what was wrong; the resolver answers SERVFAIL.
Result<Answer> ReadAnswer(std::span<uint8_t> response, uint16_t expected_id, std::string_view qname,
                          uint16_t qtype, uint32_t max_ttl);

// Completes `response` (accepted by ReadAnswer, query type A, ending in an unresolved CNAME)
// with `chased`: the upstream's response to the query for its `target`, accepted by ReadAnswer
// for `target`. The CNAME and A records on the chased chain are appended after the answer
// records, with names written out uncompressed (the chased message's pointers mean nothing in
// this one) and TTLs clamped to `max_ttl`. The authority and additional sections are dropped
// (their compression pointers could point into records that would move) except an OPT record,
// which is kept; NSCOUNT becomes 0, ARCOUNT 0 or 1, ANCOUNT grows, AA and AD are cleared (the
// whole is neither authoritative nor validated), and the rcode becomes the chased one (which
// must be NOERROR or NXDOMAIN). The ID stays. Both messages are read again with ReadAnswer's
// checks; on any error, or when the result would exceed 65535 bytes, `response` is unchanged.
Result<void> AppendChased(std::vector<uint8_t>& response, std::span<const uint8_t> chased,
                          std::string_view target, uint32_t max_ttl);

// When `response` is longer than `limit` (Query::udp_payload for a UDP client), cuts it to the
// header and question with TC=1 and ANCOUNT=NSCOUNT=ARCOUNT=0, so the client retries over TCP
// (just the header, QDCOUNT 0 too, if the question cannot be read). Returns whether it cut.
bool TruncateForUdp(std::vector<uint8_t>& response, size_t limit);

// A name pattern of the egress policy: "pypi.org" (that name), "*.github.com" (one or more
// labels under it, not github.com itself) or "*" (every name).
class NamePattern {
 public:
  // Lowercases; labels of 1..63 characters of [a-z0-9-_], at most 253 characters in all; "*"
  // only alone or as the whole first label; one trailing dot is dropped. Errors are
  // kInvalidRequest, naming the pattern and what is wrong with it.
  static Result<NamePattern> Parse(std::string_view text);

  // Whether `name` (dotted, as Query::name) matches; compared case-insensitively (ASCII).
  bool Matches(std::string_view name) const;
  // The pattern as Parse would read it back: "*.github.com".
  std::string text() const;

  bool operator==(const NamePattern&) const = default;

 private:
  enum class Kind : uint8_t { kExact, kSubdomains, kAny };
  NamePattern(Kind kind, std::string name) : kind_(kind), name_(std::move(name)) {}

  Kind kind_;
  std::string name_;  // the name, or the parent of kSubdomains; "" for kAny
};

// The policy's verdict on a name: some allow pattern matches and no deny pattern does.
bool NameAllowed(std::string_view name, std::span<const NamePattern> allow,
                 std::span<const NamePattern> deny);

}  // namespace sandstream::net::dns
