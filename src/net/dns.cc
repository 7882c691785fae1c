#include "net/dns.h"

#include <algorithm>
#include <utility>

namespace sandstream::net::dns {
namespace {

constexpr size_t kMaxNameWire = 255;  // RFC 1035 §3.1, the root's length byte included
constexpr int kMaxPointerHops = 128;
constexpr size_t kMaxChainLinks = 16;
constexpr size_t kMaxMessage = 65535;

// Header flag bits (the 16-bit word at offset 2).
constexpr uint16_t kFlagQr = 0x8000;
constexpr uint16_t kFlagAa = 0x0400;
constexpr uint16_t kFlagTc = 0x0200;
constexpr uint16_t kFlagRd = 0x0100;
constexpr uint16_t kFlagRa = 0x0080;
constexpr uint16_t kFlagAd = 0x0020;
constexpr uint16_t kFlagCd = 0x0010;

uint16_t Get16(std::span<const uint8_t> m, size_t at) {
  return static_cast<uint16_t>(m[at] << 8 | m[at + 1]);
}
uint32_t Get32(std::span<const uint8_t> m, size_t at) {
  return static_cast<uint32_t>(m[at]) << 24 | static_cast<uint32_t>(m[at + 1]) << 16 |
         static_cast<uint32_t>(m[at + 2]) << 8 | m[at + 3];
}
void Put16(std::span<uint8_t> m, size_t at, uint16_t v) {
  m[at] = static_cast<uint8_t>(v >> 8);
  m[at + 1] = static_cast<uint8_t>(v);
}
void Put32(std::span<uint8_t> m, size_t at, uint32_t v) {
  Put16(m, at, static_cast<uint16_t>(v >> 16));
  Put16(m, at + 2, static_cast<uint16_t>(v));
}
void Append16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}
void Append32(std::vector<uint8_t>& out, uint32_t v) {
  Append16(out, static_cast<uint16_t>(v >> 16));
  Append16(out, static_cast<uint16_t>(v));
}

char Lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string Lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = Lower(c);
  return out;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return Lower(x) == Lower(y); });
}

enum class NameError { kNone, kTruncated, kPointer, kLabelType, kTooLong, kAmbiguous };

// Reads the name at `at` and sets `end` to the offset just past it in place (a pointer ends it
// there). With `pointers`, compression pointers are followed: each must point strictly
// backwards and past the header, at most kMaxPointerHops in all; together with the 255-byte
// limit on the expanded name that bounds every loop. With `out`, the name is expanded into it,
// lowercase and dotted, and a label holding '.' or NUL is refused.
NameError ReadName(std::span<const uint8_t> m, size_t at, bool pointers, std::string* out,
                   size_t& end) {
  if (out) out->clear();
  std::optional<size_t> after_pointer;
  size_t wire = 1;
  int hops = 0;
  for (;;) {
    if (at >= m.size()) return NameError::kTruncated;
    const uint8_t len = m[at];
    if ((len & 0xC0) == 0xC0) {
      if (!pointers) return NameError::kPointer;
      if (at + 1 >= m.size()) return NameError::kTruncated;
      const size_t target = static_cast<size_t>(len & 0x3F) << 8 | m[at + 1];
      if (target < kHeaderSize || target >= at || ++hops > kMaxPointerHops) {
        return NameError::kPointer;
      }
      if (!after_pointer) after_pointer = at + 2;
      at = target;
      continue;
    }
    if ((len & 0xC0) != 0) return NameError::kLabelType;
    if (len == 0) {
      end = after_pointer.value_or(at + 1);
      return NameError::kNone;
    }
    wire += 1 + len;
    if (wire > kMaxNameWire) return NameError::kTooLong;
    if (at + 1 + len > m.size()) return NameError::kTruncated;
    if (out) {
      if (!out->empty()) out->push_back('.');
      for (size_t i = at + 1; i < at + 1 + len; ++i) {
        const char c = static_cast<char>(m[i]);
        if (c == '.' || c == '\0') return NameError::kAmbiguous;
        out->push_back(Lower(c));
      }
    }
    at += 1 + len;
  }
}

std::string_view Describe(NameError e) {
  switch (e) {
    case NameError::kNone:
      return "no error";
    case NameError::kTruncated:
      return "name runs past the message";
    case NameError::kPointer:
      return "bad compression pointer";
    case NameError::kLabelType:
      return "label type 0x40/0x80";
    case NameError::kTooLong:
      return "name over 255 bytes";
    case NameError::kAmbiguous:
      return "label holding '.' or NUL";
  }
  return "bad name";
}

// Appends `name` (dotted, "" for the root) in wire form, uncompressed.
bool AppendName(std::vector<uint8_t>& out, std::string_view name) {
  size_t wire = 1;
  while (!name.empty()) {
    const size_t dot = name.find('.');
    const std::string_view label = name.substr(0, dot);
    if (label.empty() || label.size() > 63 || label.find('\0') != std::string_view::npos) {
      return false;
    }
    wire += 1 + label.size();
    if (wire > kMaxNameWire) return false;
    out.push_back(static_cast<uint8_t>(label.size()));
    out.insert(out.end(), label.begin(), label.end());
    if (dot == std::string_view::npos) break;
    name.remove_prefix(dot + 1);
    if (name.empty()) return false;  // a trailing dot: an empty last label
  }
  out.push_back(0);
  return true;
}

ParsedQuery Refuse(Rcode rcode, std::string_view reason) {
  return {std::nullopt, rcode, reason};
}

Error BadAnswer(std::string_view what) {
  return Error{ErrorCode::kBadGateway, "dns answer: " + std::string(what)};
}

// One record of an answer section, as Walk read it.
struct Rr {
  std::string owner;  // lowercase, dotted
  uint16_t type = 0;
  uint16_t cls = 0;
  uint32_t ttl = 0;
  size_t ttl_at = 0;  // offset of the TTL field
  size_t rdata_at = 0;
  uint16_t rdlength = 0;
  std::string target;  // a class IN CNAME's
};

// A response's layout: its question and answer records, and where its sections are.
struct Layout {
  uint16_t id = 0;
  uint16_t flags = 0;
  std::string qname;
  uint16_t qtype = 0;
  uint16_t qclass = 0;
  size_t question_end = 0;
  std::vector<Rr> answers;  // empty when TC
  size_t answer_end = 0;
  std::optional<std::pair<size_t, size_t>> opt;  // [begin, end) of the additional OPT

  bool truncated() const { return (flags & kFlagTc) != 0; }
  Rcode rcode() const { return static_cast<Rcode>(flags & 0x0F); }
};

// Reads a response's framing, with the checks ReadAnswer documents except those against the
// query. A truncated response is read only up to its question.
Result<Layout> Walk(std::span<const uint8_t> m) {
  if (m.size() < kHeaderSize) return BadAnswer("shorter than a header");
  if (m.size() > kMaxMessage) return BadAnswer("longer than 65535 bytes");
  Layout l;
  l.id = Get16(m, 0);
  l.flags = Get16(m, 2);
  if ((l.flags & kFlagQr) == 0) return BadAnswer("not a response (QR=0)");
  if ((l.flags >> 11 & 0xF) != 0) return BadAnswer("opcode is not QUERY");
  if (Get16(m, 4) != 1) return BadAnswer("QDCOUNT is not 1");
  size_t at = 0;
  if (NameError e = ReadName(m, kHeaderSize, true, &l.qname, at); e != NameError::kNone) {
    return BadAnswer("question: " + std::string(Describe(e)));
  }
  if (at + 4 > m.size()) return BadAnswer("question runs past the message");
  l.qtype = Get16(m, at);
  l.qclass = Get16(m, at + 2);
  l.question_end = at + 4;
  l.answer_end = l.question_end;
  if (l.truncated()) return l;

  const uint16_t counts[3] = {Get16(m, 6), Get16(m, 8), Get16(m, 10)};
  static constexpr std::string_view kSection[3] = {"answer", "authority", "additional"};
  at = l.question_end;
  for (int section = 0; section < 3; ++section) {
    const std::string where(kSection[section]);
    for (uint32_t i = 0; i < counts[section]; ++i) {
      const size_t begin = at;
      Rr rr;
      // Only answer owners are compared with names; other sections are framed, never read.
      std::string* owner = section == 0 ? &rr.owner : nullptr;
      if (NameError e = ReadName(m, at, true, owner, at); e != NameError::kNone) {
        return BadAnswer(where + " record " + std::to_string(i) + ": " + std::string(Describe(e)));
      }
      if (at + 10 > m.size()) return BadAnswer(where + " record runs past the message");
      rr.type = Get16(m, at);
      rr.cls = Get16(m, at + 2);
      rr.ttl_at = at + 4;
      rr.ttl = Get32(m, at + 4);
      rr.rdlength = Get16(m, at + 8);
      rr.rdata_at = at + 10;
      at = rr.rdata_at + rr.rdlength;
      if (at > m.size()) return BadAnswer(where + " RDATA runs past the message");
      if (rr.type == kTypeOpt) {
        if (section != 2) return BadAnswer("OPT record in the " + where + " section");
        if (l.opt) return BadAnswer("two OPT records");
        if (m[begin] != 0) return BadAnswer("OPT record not owned by the root");
        l.opt = std::pair(begin, at);
      }
      if (section != 0) continue;
      if (rr.cls == kClassIn && rr.type == kTypeA && rr.rdlength != 4) {
        return BadAnswer("A record with RDLENGTH " + std::to_string(rr.rdlength));
      }
      if (rr.cls == kClassIn && rr.type == kTypeCname) {
        size_t end = 0;
        if (NameError e = ReadName(m, rr.rdata_at, true, &rr.target, end); e != NameError::kNone) {
          return BadAnswer("CNAME target: " + std::string(Describe(e)));
        }
        if (end != at) return BadAnswer("CNAME RDATA is not exactly one name");
      }
      l.answers.push_back(std::move(rr));
    }
    if (section == 0) l.answer_end = at;
  }
  if (at != m.size()) return BadAnswer("bytes after the last record");
  return l;
}

// The CNAME chain from `qname` (lowercase) through the answer records.
Result<std::vector<std::string>> FollowChain(const Layout& l, std::string qname) {
  std::vector<std::string> chain{std::move(qname)};
  for (;;) {
    const std::string* next = nullptr;
    for (const Rr& rr : l.answers) {
      if (rr.cls != kClassIn || rr.type != kTypeCname || rr.owner != chain.back()) continue;
      if (next && *next != rr.target) return BadAnswer("two CNAMEs for " + chain.back());
      next = &rr.target;
    }
    if (!next) return chain;
    if (std::find(chain.begin(), chain.end(), *next) != chain.end()) {
      return BadAnswer("CNAME loop at " + *next);
    }
    if (chain.size() > kMaxChainLinks) return BadAnswer("CNAME chain over 16 links");
    chain.push_back(*next);
  }
}

bool OnChain(const std::vector<std::string>& chain, const std::string& name) {
  return std::find(chain.begin(), chain.end(), name) != chain.end();
}

uint32_t ClampTtl(uint32_t ttl, uint32_t max_ttl) {
  if (ttl > 0x7FFFFFFF) return 0;  // RFC 2181 §8: the top bit set means 0
  return std::min(ttl, max_ttl);
}

}  // namespace

ParsedQuery ParseQuery(std::span<const uint8_t> msg) {
  if (msg.size() < kHeaderSize) return Refuse(Rcode::kFormErr, "shorter than a header");
  const uint16_t flags = Get16(msg, 2);
  if (flags & kFlagQr) return Refuse(Rcode::kFormErr, "a response, not a query");
  if ((flags >> 11 & 0xF) != 0) return Refuse(Rcode::kNotImp, "opcode is not QUERY");
  if (Get16(msg, 4) != 1) return Refuse(Rcode::kFormErr, "QDCOUNT is not 1");
  if (Get16(msg, 6) != 0 || Get16(msg, 8) != 0) {
    return Refuse(Rcode::kFormErr, "answer or authority records in a query");
  }
  const uint16_t arcount = Get16(msg, 10);
  if (arcount > 1) return Refuse(Rcode::kFormErr, "more than one additional record");

  Query q;
  q.id = Get16(msg, 0);
  q.recursion_desired = (flags & kFlagRd) != 0;
  size_t at = 0;
  switch (ReadName(msg, kHeaderSize, false, &q.name, at)) {
    case NameError::kNone:
      break;
    case NameError::kTruncated:
      return Refuse(Rcode::kFormErr, "question name runs past the message");
    case NameError::kPointer:
      return Refuse(Rcode::kFormErr, "compression pointer in the question");
    case NameError::kLabelType:
      return Refuse(Rcode::kFormErr, "label type 0x40/0x80 in the question");
    case NameError::kTooLong:
      return Refuse(Rcode::kFormErr, "question name over 255 bytes");
    case NameError::kAmbiguous:
      return Refuse(Rcode::kFormErr, "question label holding '.' or NUL");
  }
  if (at + 4 > msg.size()) return Refuse(Rcode::kFormErr, "question runs past the message");
  q.type = Get16(msg, at);
  q.qclass = Get16(msg, at + 2);
  q.question_end = at + 4;
  at = q.question_end;
  if (arcount == 1) {
    // The OPT's owner is the root, so one zero byte (RFC 6891 §6.1.2).
    if (at + 11 > msg.size())
      return Refuse(Rcode::kFormErr, "additional record runs past the message");
    if (msg[at] != 0 || Get16(msg, at + 1) != kTypeOpt) {
      return Refuse(Rcode::kFormErr, "additional record is not an OPT owned by the root");
    }
    q.edns = true;
    q.udp_payload = std::max<uint16_t>(Get16(msg, at + 3), kClassicUdpSize);
    at += 11 + Get16(msg, at + 9);
    if (at > msg.size()) return Refuse(Rcode::kFormErr, "OPT RDATA runs past the message");
  }
  if (at != msg.size()) return Refuse(Rcode::kFormErr, "bytes after the question");
  if (q.qclass != kClassIn) return Refuse(Rcode::kNotImp, "QCLASS is not IN");
  return {std::move(q), Rcode::kNoError, {}};
}

std::vector<uint8_t> Reply(std::span<const uint8_t> query, const Query& q, Rcode rcode) {
  if (q.question_end < kHeaderSize || q.question_end > query.size()) {
    return HeaderOnlyReply(query, Rcode::kServFail);  // not the query q was read from
  }
  std::vector<uint8_t> out(query.begin(), query.begin() + static_cast<ptrdiff_t>(q.question_end));
  const uint16_t flags = Get16(query, 2);
  Put16(out, 2,
        static_cast<uint16_t>(kFlagQr | (flags & (kFlagRd | kFlagCd)) | kFlagRa |
                              (static_cast<uint16_t>(rcode) & 0x0F)));
  Put16(out, 4, 1);
  Put16(out, 6, 0);
  Put16(out, 8, 0);
  Put16(out, 10, 0);
  return out;
}

std::vector<uint8_t> HeaderOnlyReply(std::span<const uint8_t> msg, Rcode rcode) {
  if (msg.size() < kHeaderSize || (Get16(msg, 2) & kFlagQr) != 0) return {};
  std::vector<uint8_t> out(kHeaderSize, 0);
  out[0] = msg[0];
  out[1] = msg[1];
  const uint16_t opcode_rd = Get16(msg, 2) & (0x7800 | kFlagRd);
  Put16(
      out, 2,
      static_cast<uint16_t>(kFlagQr | opcode_rd | kFlagRa | (static_cast<uint16_t>(rcode) & 0x0F)));
  return out;
}

Result<std::vector<uint8_t>> MakeQuery(uint16_t id, std::string_view name, uint16_t type,
                                       uint16_t udp_payload) {
  std::vector<uint8_t> out;
  out.reserve(kHeaderSize + name.size() + 2 + 4 + 11);
  Append16(out, id);
  Append16(out, kFlagRd);
  Append16(out, 1);
  Append16(out, 0);
  Append16(out, 0);
  Append16(out, udp_payload != 0 ? 1 : 0);
  if (!AppendName(out, name)) {
    return Error{ErrorCode::kInvalidRequest,
                 "dns query: not a name: \"" + std::string(name) + "\""};
  }
  Append16(out, type);
  Append16(out, kClassIn);
  if (udp_payload != 0) {
    out.push_back(0);  // the root
    Append16(out, kTypeOpt);
    Append16(out, udp_payload);
    Append32(out, 0);  // extended rcode, version 0, no flags
    Append16(out, 0);
  }
  return out;
}

void SetId(std::span<uint8_t> msg, uint16_t id) {
  if (msg.size() >= 2) Put16(msg, 0, id);
}

Result<Answer> ReadAnswer(std::span<uint8_t> response, uint16_t expected_id, std::string_view qname,
                          uint16_t qtype, uint32_t max_ttl) {
  auto layout = Walk(response);
  if (!layout) return std::move(layout).error();
  const Layout& l = *layout;
  if (l.id != expected_id) return BadAnswer("ID is not ours");
  if (!EqualsIgnoreCase(l.qname, qname) || l.qtype != qtype || l.qclass != kClassIn) {
    return BadAnswer("question is not ours");
  }
  Answer answer;
  answer.rcode = l.rcode();
  answer.truncated = l.truncated();
  if (answer.truncated) return answer;

  auto chain = FollowChain(l, Lowercase(qname));
  if (!chain) return std::move(chain).error();
  answer.chain = std::move(*chain);
  // A compression pointer may point into a TTL field (any earlier bytes are fair game to
  // one): clamping would then rewrite a name. Such a message is refused, untouched.
  const std::vector<uint8_t> before(response.begin(), response.end());
  for (const Rr& rr : l.answers) Put32(response, rr.ttl_at, ClampTtl(rr.ttl, max_ttl));
  if (auto again = Walk(response); !again || again->answers.size() != l.answers.size() ||
                                   !std::equal(l.answers.begin(), l.answers.end(),
                                               again->answers.begin(),
                                               [](const Rr& a, const Rr& b) {
                                                 return a.owner == b.owner && a.target == b.target;
                                               })) {
    std::copy(before.begin(), before.end(), response.begin());
    return BadAnswer("a name points into a TTL");
  }
  bool target_answered = false;
  for (const Rr& rr : l.answers) {
    const uint32_t ttl = ClampTtl(rr.ttl, max_ttl);
    if (rr.cls != kClassIn || !OnChain(answer.chain, rr.owner)) continue;
    if (rr.type == kTypeA) answer.a.push_back({Get32(response, rr.rdata_at), ttl});
    if (rr.type == qtype && rr.owner == answer.chain.back()) target_answered = true;
  }
  if (answer.chain.size() > 1 && answer.rcode == Rcode::kNoError && qtype != kTypeCname &&
      !target_answered) {
    answer.unresolved_cname = answer.chain.back();
  }
  return answer;
}

Result<void> AppendChased(std::vector<uint8_t>& response, std::span<const uint8_t> chased,
                          std::string_view target, uint32_t max_ttl) {
  auto first = Walk(response);
  if (!first) return std::move(first).error();
  auto second = Walk(chased);
  if (!second) return std::move(second).error();
  if (first->truncated() || second->truncated()) return BadAnswer("truncated, cannot chase");
  if (first->qtype != kTypeA) return BadAnswer("only A queries are chased");
  if (!EqualsIgnoreCase(second->qname, target) || second->qtype != first->qtype ||
      second->qclass != kClassIn) {
    return BadAnswer("chased question is not the target's");
  }
  if (second->rcode() != Rcode::kNoError && second->rcode() != Rcode::kNxDomain) {
    return BadAnswer("chased rcode is neither NOERROR nor NXDOMAIN");
  }
  auto first_chain = FollowChain(*first, first->qname);
  if (!first_chain) return std::move(first_chain).error();
  if (first_chain->back() != Lowercase(target)) return BadAnswer("target does not end the chain");
  auto chain = FollowChain(*second, Lowercase(target));
  if (!chain) return std::move(chain).error();

  std::vector<uint8_t> out(response.begin(),
                           response.begin() + static_cast<ptrdiff_t>(first->answer_end));
  size_t added = 0;
  for (const Rr& rr : second->answers) {
    if (rr.cls != kClassIn || (rr.type != kTypeA && rr.type != kTypeCname) ||
        !OnChain(*chain, rr.owner)) {
      continue;
    }
    if (!AppendName(out, rr.owner)) return BadAnswer("chased owner cannot be written");
    Append16(out, rr.type);
    Append16(out, kClassIn);
    Append32(out, ClampTtl(rr.ttl, max_ttl));
    if (rr.type == kTypeA) {
      Append16(out, 4);
      out.insert(out.end(), chased.begin() + static_cast<ptrdiff_t>(rr.rdata_at),
                 chased.begin() + static_cast<ptrdiff_t>(rr.rdata_at + 4));
    } else {
      const size_t length_at = out.size();
      Append16(out, 0);
      if (!AppendName(out, rr.target)) return BadAnswer("chased target cannot be written");
      Put16(out, length_at, static_cast<uint16_t>(out.size() - length_at - 2));
    }
    ++added;
    if (out.size() > kMaxMessage) return BadAnswer("chased answer makes it over 65535 bytes");
  }
  if (first->opt) {
    out.insert(out.end(), response.begin() + static_cast<ptrdiff_t>(first->opt->first),
               response.begin() + static_cast<ptrdiff_t>(first->opt->second));
  }
  const size_t ancount = first->answers.size() + added;
  if (out.size() > kMaxMessage || ancount > 0xFFFF) {
    return BadAnswer("chased answer makes it over 65535 bytes");
  }
  const uint16_t flags = static_cast<uint16_t>((first->flags & ~(kFlagAa | kFlagAd | 0x0F)) |
                                               static_cast<uint16_t>(second->rcode()));
  Put16(out, 2, flags);
  Put16(out, 6, static_cast<uint16_t>(ancount));
  Put16(out, 8, 0);
  Put16(out, 10, first->opt ? 1 : 0);
  // The two chains must make one that ReadAnswer takes: no loop through both, no name with a
  // CNAME in each, at most 16 links in all. Reading the result again checks exactly that.
  auto whole = Walk(out);
  if (!whole) return std::move(whole).error();
  if (auto whole_chain = FollowChain(*whole, first->qname); !whole_chain) {
    return std::move(whole_chain).error();
  }
  response = std::move(out);
  return Ok{};
}

bool TruncateForUdp(std::vector<uint8_t>& response, size_t limit) {
  if (response.size() <= limit || response.size() < kHeaderSize) return false;
  size_t end = kHeaderSize;
  size_t name_end = 0;
  const bool question =
      Get16(response, 4) == 1 &&
      ReadName(response, kHeaderSize, false, nullptr, name_end) == NameError::kNone &&
      name_end + 4 <= response.size();
  if (question) end = name_end + 4;
  response.resize(end);
  Put16(response, 2, static_cast<uint16_t>(Get16(response, 2) | kFlagTc));
  Put16(response, 4, question ? 1 : 0);
  Put16(response, 6, 0);
  Put16(response, 8, 0);
  Put16(response, 10, 0);
  return true;
}

Result<NamePattern> NamePattern::Parse(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return Error{ErrorCode::kInvalidRequest,
                 "invalid name pattern \"" + std::string(text) + "\": " + std::string(why)};
  };
  std::string s = Lowercase(text);
  if (!s.empty() && s.back() == '.') s.pop_back();
  if (s.empty()) return bad("empty");
  if (s == "*") return NamePattern(Kind::kAny, "");
  if (s.size() > 253) return bad("longer than 253 characters");
  Kind kind = Kind::kExact;
  std::string_view name = s;
  if (name.starts_with("*.")) {
    kind = Kind::kSubdomains;
    name.remove_prefix(2);
  }
  for (std::string_view rest = name;;) {
    const size_t dot = rest.find('.');
    const std::string_view label = rest.substr(0, dot);
    if (label.empty()) return bad("empty label");
    if (label.size() > 63) return bad("label longer than 63 characters");
    for (const char c : label) {
      if (c == '*') return bad("* only alone or as the whole first label");
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) {
        return bad("a label may hold only letters, digits, '-' and '_'");
      }
    }
    if (dot == std::string_view::npos) break;
    rest.remove_prefix(dot + 1);
  }
  return NamePattern(kind, std::string(name));
}

bool NamePattern::Matches(std::string_view name) const {
  switch (kind_) {
    case Kind::kAny:
      return true;
    case Kind::kExact:
      return EqualsIgnoreCase(name, name_);
    case Kind::kSubdomains:
      return name.size() > name_.size() + 1 && name[name.size() - name_.size() - 1] == '.' &&
             EqualsIgnoreCase(name.substr(name.size() - name_.size()), name_);
  }
  return false;
}

std::string NamePattern::text() const {
  switch (kind_) {
    case Kind::kAny:
      return "*";
    case Kind::kSubdomains:
      return "*." + name_;
    case Kind::kExact:
      return name_;
  }
  return name_;
}

bool NameAllowed(std::string_view name, std::span<const NamePattern> allow,
                 std::span<const NamePattern> deny) {
  const auto matches = [&](const NamePattern& p) { return p.Matches(name); };
  return std::none_of(deny.begin(), deny.end(), matches) &&
         std::any_of(allow.begin(), allow.end(), matches);
}

}  // namespace sandstream::net::dns
