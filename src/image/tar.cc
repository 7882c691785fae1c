#include "image/tar.h"

#include <algorithm>
#include <cstring>

namespace sandstream::image {
namespace {

constexpr size_t kBlock = 512;
// A PAX header or a GNU long name of more is refused: names are at most kMaxPathBytes, and
// xattrs worth keeping are small.
constexpr uint64_t kMaxMetaBytes = 1 << 20;
// PAX global headers of more, all of an archive's together, are refused: each later entry
// looks its values up, so what they hold must stay small.
constexpr uint64_t kMaxGlobalBytes = 1 << 20;

// The records the reader takes from a PAX header, global or not (xattrs only from an entry's
// own, sparse-file keys only to refuse the entry).
constexpr std::string_view kPaxKeys[] = {"path", "linkpath", "size", "uid", "gid", "mtime"};
constexpr std::string_view kSparsePrefix = "GNU.sparse.";
constexpr std::string_view kXattrPrefix = "SCHILY.xattr.";

bool UsedGlobally(std::string_view key) {
  return std::find(std::begin(kPaxKeys), std::end(kPaxKeys), key) != std::end(kPaxKeys) ||
         key.substr(0, kSparsePrefix.size()) == kSparsePrefix;
}

// Whether `records` holds a key starting with `prefix`.
bool HasPrefix(const std::map<std::string, std::string, std::less<>>& records,
               std::string_view prefix) {
  const auto it = records.lower_bound(prefix);
  return it != records.end() && std::string_view(it->first).substr(0, prefix.size()) == prefix;
}

// Header field offsets and widths (POSIX ustar).
struct Field {
  size_t at;
  size_t len;
};
constexpr Field kName{0, 100}, kMode{100, 8}, kUid{108, 8}, kGid{116, 8}, kSize{124, 12},
    kMtime{136, 12}, kChksum{148, 8}, kType{156, 1}, kLinkname{157, 100}, kMagic{257, 8},
    kDevMajor{329, 8}, kDevMinor{337, 8}, kPrefix{345, 155};

std::string_view Bytes(const char* block, Field f) { return {block + f.at, f.len}; }

// A NUL-terminated field (or one that fills its width).
std::string CString(const char* block, Field f) {
  const std::string_view v = Bytes(block, f);
  return std::string(v.substr(0, v.find('\0')));
}

// A numeric field: octal digits between spaces and NULs, or base-256 (the first byte's top bit
// set, two's complement), as GNU tar and Go write numbers that do not fit in octal.
std::optional<int64_t> ParseNumber(std::string_view f) {
  if (!f.empty() && (static_cast<unsigned char>(f[0]) & 0x80)) {
    const unsigned char inv = (static_cast<unsigned char>(f[0]) & 0x40) ? 0xff : 0;
    uint64_t x = 0;
    for (size_t i = 0; i < f.size(); ++i) {
      unsigned char c = static_cast<unsigned char>(f[i]) ^ inv;
      if (i == 0) c &= 0x7f;
      if ((x >> 56) != 0) return std::nullopt;
      x = x << 8 | c;
    }
    if ((x >> 63) != 0) return std::nullopt;
    return inv ? ~static_cast<int64_t>(x) : static_cast<int64_t>(x);
  }
  const size_t first = f.find_first_not_of(std::string_view(" \0", 2));
  if (first == std::string_view::npos) return 0;
  f = f.substr(first, f.find_last_not_of(std::string_view(" \0", 2)) + 1 - first);
  uint64_t x = 0;
  for (char c : f) {
    if (c < '0' || c > '7' || (x >> 60) != 0) return std::nullopt;
    x = x << 3 | static_cast<uint64_t>(c - '0');
  }
  return static_cast<int64_t>(x);
}

// A PAX decimal: digits only, no sign, fits in uint64_t.
std::optional<uint64_t> ParseDecimal(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  uint64_t x = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    x = x * 10 + static_cast<uint64_t>(c - '0');
  }
  return x;
}

bool AllZero(const char* block) {
  return std::all_of(block, block + kBlock, [](char c) { return c == 0; });
}

bool ChecksumMatches(const char* block) {
  const auto stored = ParseNumber(Bytes(block, kChksum));
  if (!stored) return false;
  uint64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const bool in_field = i >= kChksum.at && i < kChksum.at + kChksum.len;
    const char c = in_field ? ' ' : block[i];
    unsigned_sum += static_cast<unsigned char>(c);
    signed_sum += static_cast<signed char>(c);
  }
  // Some old writers summed signed chars; both are accepted, as GNU tar does.
  return static_cast<int64_t>(unsigned_sum) == *stored || signed_sum == *stored;
}

}  // namespace

Result<std::string> NormalizeEntryName(std::string_view name) {
  auto bad = [](std::string why) { return Error{ErrorCode::kInvalidRequest, std::move(why)}; };
  if (name.empty()) return bad("empty name");
  if (name.find('\0') != std::string_view::npos) return bad("name holds a NUL byte");
  if (name.size() > kMaxPathBytes) return bad("name longer than 4095 bytes");
  std::string out;
  while (!name.empty()) {
    const size_t slash = name.find('/');
    const std::string_view part = name.substr(0, slash);
    name.remove_prefix(slash == std::string_view::npos ? name.size() : slash + 1);
    if (part.empty() || part == ".") continue;
    if (part == "..") return bad("path climbs out ('..')");
    // A whiteout marker may be 4 bytes longer than the name it hides ('.wh.' and 255).
    const size_t max = part.substr(0, 4) == ".wh." ? 259 : 255;
    if (part.size() > max) return bad("a path component longer than 255 bytes");
    if (!out.empty()) out += '/';
    out += part;
  }
  return out;
}

std::string Quote(std::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  constexpr size_t kShown = 200;
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < kShown; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (name.size() > kShown) out += "...";
  return out + "'";
}

Result<void> TarReader::ReadBlock(char* block, bool* eof) {
  size_t done = 0;
  while (done < kBlock) {
    auto got = in_.Read(block + done, kBlock - done);
    if (!got) return std::move(got).error();
    if (*got == 0) {
      if (done == 0 && eof) {
        *eof = true;
        return Ok{};
      }
      return Error{ErrorCode::kInvalidRequest,
                   what_ + ": truncated tar (a header ends early at byte " +
                       std::to_string(position_ + done) + ")"};
    }
    done += *got;
  }
  position_ += kBlock;
  if (eof) *eof = false;
  return Ok{};
}

Result<void> TarReader::SkipData() {
  const uint64_t n = data_left_ + padding_;
  data_left_ = padding_ = 0;
  if (n == 0) return Ok{};
  if (auto ok = in_.Skip(n); !ok) {
    return Error{ok.error().code, what_ + ": truncated tar (an entry's data ends early)"};
  }
  position_ += n;
  return Ok{};
}

Result<std::string> TarReader::ReadMeta(uint64_t size, std::string_view kind) {
  if (size > kMaxMetaBytes) {
    return Error{ErrorCode::kInvalidRequest, what_ + ": a " + std::string(kind) + " of " +
                                                 std::to_string(size) + " bytes (at most " +
                                                 std::to_string(kMaxMetaBytes) + ")"};
  }
  std::string data(static_cast<size_t>(size), '\0');
  const std::string what = what_ + ": truncated tar (a " + std::string(kind) + " ends early)";
  if (auto ok = ReadFull(in_, data.data(), data.size(), what); !ok) return std::move(ok).error();
  const uint64_t pad = (kBlock - size % kBlock) % kBlock;
  if (auto ok = in_.Skip(pad); !ok) return Error{ErrorCode::kInvalidRequest, what};
  position_ += size + pad;
  return data;
}

Result<void> TarReader::ApplyPax(std::string_view records, PaxRecords& into, bool global) {
  auto bad = [&] {
    return Error{ErrorCode::kInvalidRequest, what_ + ": malformed PAX header record"};
  };
  // Each record is "<length> <key>=<value>\n", the length counting the whole record.
  while (!records.empty()) {
    const size_t space = records.find(' ');
    if (space == std::string_view::npos || space == 0) return bad();
    const auto len = ParseDecimal(records.substr(0, space));
    if (!len || *len > records.size() || *len < space + 3) return bad();
    const std::string_view record = records.substr(0, static_cast<size_t>(*len));
    records.remove_prefix(static_cast<size_t>(*len));
    if (record.back() != '\n') return bad();
    const std::string_view kv = record.substr(space + 1, record.size() - space - 2);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) return bad();
    const std::string_view key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (global && !UsedGlobally(key)) continue;
    if (global && (key == "path" || key == "linkpath") && value.size() > kMaxPathBytes) {
      return Error{ErrorCode::kInvalidRequest,
                   what_ + ": a PAX global " + std::string(key) + " longer than 4095 bytes"};
    }
    into.insert_or_assign(std::string(key), std::string(value));
  }
  return Ok{};
}

Result<std::optional<TarEntry>> TarReader::Next() {
  if (ended_) return std::optional<TarEntry>();
  if (auto ok = SkipData(); !ok) return std::move(ok).error();
  PaxRecords pax;
  std::optional<std::string> long_name, long_link;
  char block[kBlock];
  for (;;) {
    const uint64_t at = position_;
    bool eof = false;
    if (auto ok = ReadBlock(block, &eof); !ok) return std::move(ok).error();
    const bool pending = !pax.empty() || long_name || long_link;
    if (eof || AllZero(block)) {
      if (!eof) {
        // The end is two zero blocks; a lone one followed by a header is not a tar.
        if (auto ok = ReadBlock(block, &eof); !ok) return std::move(ok).error();
        if (!eof && !AllZero(block)) {
          return Error{ErrorCode::kInvalidRequest,
                       what_ + ": a zero block inside the archive at byte " + std::to_string(at)};
        }
      }
      if (pending) {
        return Error{ErrorCode::kInvalidRequest,
                     what_ + ": the archive ends after a PAX or long-name header"};
      }
      ended_ = true;
      return std::optional<TarEntry>();
    }
    if (!ChecksumMatches(block)) {
      return Error{ErrorCode::kInvalidRequest,
                   what_ + ": not a tar header at byte " + std::to_string(at) +
                       " (checksum mismatch)"};
    }
    const char type = block[kType.at];
    const auto header_size = ParseNumber(Bytes(block, kSize));
    if (!header_size || *header_size < 0) {
      return Error{ErrorCode::kInvalidRequest,
                   what_ + ": bad size field in the header at byte " + std::to_string(at)};
    }
    const auto meta_size = static_cast<uint64_t>(*header_size);
    if (type == 'x' || type == 'g') {
      if (type == 'g') {
        global_bytes_ += meta_size;
        if (global_bytes_ > kMaxGlobalBytes) {
          return Error{ErrorCode::kInvalidRequest, what_ + ": PAX global headers of more than " +
                                                       std::to_string(kMaxGlobalBytes) +
                                                       " bytes in all (at byte " +
                                                       std::to_string(at) + ")"};
        }
      }
      auto data = ReadMeta(meta_size, "PAX header");
      if (!data) return std::move(data).error();
      if (auto ok = ApplyPax(*data, type == 'x' ? pax : global_, type == 'g'); !ok) {
        return std::move(ok).error();
      }
      continue;
    }
    if (type == 'L' || type == 'K') {
      auto data = ReadMeta(meta_size, "GNU long name");
      if (!data) return std::move(data).error();
      std::string& text = *data;
      while (!text.empty() && text.back() == '\0') text.pop_back();
      (type == 'L' ? long_name : long_link) = std::move(text);
      continue;
    }

    TarEntry e;
    const std::string_view magic = Bytes(block, kMagic);
    const bool posix = magic.substr(0, 6) == std::string_view("ustar\0", 6);
    e.name = CString(block, kName);
    if (posix) {
      const std::string prefix = CString(block, kPrefix);
      if (!prefix.empty()) e.name = prefix + "/" + e.name;
    }
    e.linkname = CString(block, kLinkname);
    if (long_name) e.name = *long_name;
    if (long_link) e.linkname = *long_link;

    // The entry's own record wins over a global one; the global records are looked up, never
    // copied (an archive may hold a large one and many entries).
    const auto record = [&](std::string_view key) -> const std::string* {
      if (auto it = pax.find(key); it != pax.end()) return &it->second;
      if (auto it = global_.find(key); it != global_.end()) return &it->second;
      return nullptr;
    };
    const std::string named = what_ + ": entry " + Quote(e.name);
    auto field_error = [&](std::string_view field) {
      return Error{ErrorCode::kInvalidRequest, named + ": bad " + std::string(field) + " field"};
    };
    const auto mode = ParseNumber(Bytes(block, kMode));
    const auto uid = ParseNumber(Bytes(block, kUid));
    const auto gid = ParseNumber(Bytes(block, kGid));
    const auto mtime = ParseNumber(Bytes(block, kMtime));
    const auto major = ParseNumber(Bytes(block, kDevMajor));
    const auto minor = ParseNumber(Bytes(block, kDevMinor));
    if (!mode || *mode < 0) return field_error("mode");
    if (!uid || *uid < 0 || *uid > UINT32_MAX) return field_error("uid");
    if (!gid || *gid < 0 || *gid > UINT32_MAX) return field_error("gid");
    if (!mtime) return field_error("mtime");
    if (!major || *major < 0 || *major > UINT32_MAX) return field_error("devmajor");
    if (!minor || *minor < 0 || *minor > UINT32_MAX) return field_error("devminor");
    e.mode = static_cast<uint32_t>(*mode & 07777);
    e.uid = static_cast<uint32_t>(*uid);
    e.gid = static_cast<uint32_t>(*gid);
    e.mtime = *mtime;
    e.dev_major = static_cast<uint32_t>(*major);
    e.dev_minor = static_cast<uint32_t>(*minor);
    uint64_t size = meta_size;

    if (HasPrefix(pax, kSparsePrefix) || HasPrefix(global_, kSparsePrefix)) {
      return Error{ErrorCode::kInvalidRequest, named + ": sparse files are not supported"};
    }
    for (const std::string_view key : kPaxKeys) {
      const std::string* found = record(key);
      if (!found) continue;
      const std::string& value = *found;
      if (key == "path" && !value.empty()) {
        e.name = value;
      } else if (key == "linkpath" && !value.empty()) {
        e.linkname = value;
      } else if (key == "size") {
        const auto v = ParseDecimal(value);
        if (!v || *v > INT64_MAX) return field_error("PAX size");
        size = *v;
      } else if (key == "uid" || key == "gid") {
        const auto v = ParseDecimal(value);
        if (!v || *v > UINT32_MAX) return field_error("PAX " + std::string(key));
        (key == "uid" ? e.uid : e.gid) = static_cast<uint32_t>(*v);
      } else if (key == "mtime") {
        // [-]seconds[.fraction]
        std::string_view t = value;
        const bool negative = !t.empty() && t[0] == '-';
        if (negative) t.remove_prefix(1);
        const size_t dot = t.find('.');
        const auto secs = ParseDecimal(t.substr(0, dot));
        if (!secs || *secs > INT64_MAX) return field_error("PAX mtime");
        uint32_t nsec = 0;
        if (dot != std::string_view::npos) {
          const std::string_view frac = t.substr(dot + 1);
          if (frac.empty() || !ParseDecimal(frac.substr(0, 18))) return field_error("PAX mtime");
          for (size_t i = 0; i < 9; ++i) {
            nsec = nsec * 10 + (i < frac.size() ? static_cast<uint32_t>(frac[i] - '0') : 0);
          }
        }
        e.mtime = negative ? -static_cast<int64_t>(*secs) : static_cast<int64_t>(*secs);
        e.mtime_nsec = negative ? 0 : nsec;
      }
    }
    for (auto it = pax.lower_bound(kXattrPrefix);
         it != pax.end() &&
         std::string_view(it->first).substr(0, kXattrPrefix.size()) == kXattrPrefix;
         ++it) {
      e.xattrs.emplace_back(it->first.substr(kXattrPrefix.size()), std::move(it->second));
    }
    // The entry's own name from here on (a PAX path or long name replaces the header's).
    const std::string entry = what_ + ": entry " + Quote(e.name);
    bool has_data = false;
    switch (type) {
      case '0':
      case '7':
        has_data = true;
        break;
      case '\0':
        // Pre-POSIX archives mark a directory only by the "/" after its name.
        has_data = e.name.empty() || e.name.back() != '/';
        if (!has_data) e.type = EntryType::kDirectory;
        break;
      case '1': e.type = EntryType::kHardlink; break;
      case '2': e.type = EntryType::kSymlink; break;
      case '3': e.type = EntryType::kCharDevice; break;
      case '4': e.type = EntryType::kBlockDevice; break;
      case '5': e.type = EntryType::kDirectory; break;
      case '6': e.type = EntryType::kFifo; break;
      case 'S':
        return Error{ErrorCode::kInvalidRequest, entry + ": sparse files are not supported"};
      default: {
        return Error{ErrorCode::kInvalidRequest,
                     entry + ": entry type " + Quote(std::string_view(&type, 1)) +
                         " is not supported"};
      }
    }
    // Only files carry data; the size of any other entry is ignored, as Go's reader does.
    e.size = has_data ? size : 0;
    data_left_ = e.size;
    padding_ = (kBlock - e.size % kBlock) % kBlock;
    return std::optional<TarEntry>(std::move(e));
  }
}

Result<size_t> TarReader::ReadData(char* buf, size_t size) {
  size = static_cast<size_t>(std::min<uint64_t>(size, data_left_));
  if (size == 0) return size_t{0};
  auto got = in_.Read(buf, size);
  if (!got) return got;
  if (*got == 0) {
    return Error{ErrorCode::kInvalidRequest,
                 what_ + ": truncated tar (an entry's data ends early)"};
  }
  data_left_ -= *got;
  position_ += *got;
  return got;
}

namespace {

void PutOctal(char* block, Field f, uint64_t value) {
  // Zero-padded to the field's width less one, then a NUL.
  for (size_t i = f.len - 1; i-- > 0;) {
    block[f.at + i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
  block[f.at + f.len - 1] = '\0';
}

void PutString(char* block, Field f, std::string_view s) {
  std::memcpy(block + f.at, s.data(), std::min(s.size(), f.len));
}

// The largest value an octal field of `f` holds.
uint64_t OctalMax(Field f) { return (uint64_t{1} << (3 * (f.len - 1))) - 1; }

char TypeFlag(EntryType t) {
  switch (t) {
    case EntryType::kFile: return '0';
    case EntryType::kHardlink: return '1';
    case EntryType::kSymlink: return '2';
    case EntryType::kCharDevice: return '3';
    case EntryType::kBlockDevice: return '4';
    case EntryType::kDirectory: return '5';
    case EntryType::kFifo: return '6';
  }
  return '0';
}

void Seal(char* block) {
  std::memset(block + kChksum.at, ' ', kChksum.len);
  uint64_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i) sum += static_cast<unsigned char>(block[i]);
  PutOctal(block, Field{kChksum.at, 7}, sum);
}

void FillHeader(char* block, std::string_view name, char type, uint32_t mode, uint64_t uid,
                uint64_t gid, uint64_t size, uint64_t mtime, std::string_view linkname) {
  std::memset(block, 0, kBlock);
  PutString(block, kName, name);
  PutOctal(block, kMode, mode);
  PutOctal(block, kUid, uid);
  PutOctal(block, kGid, gid);
  PutOctal(block, kSize, size);
  PutOctal(block, kMtime, mtime);
  block[kType.at] = type;
  PutString(block, kLinkname, linkname);
  std::memcpy(block + kMagic.at, "ustar\0" "00", 8);
  PutOctal(block, kDevMajor, 0);
  PutOctal(block, kDevMinor, 0);
  Seal(block);
}

std::string PaxRecord(std::string_view key, std::string_view value) {
  // The length counts its own digits: grow it until it is stable.
  const size_t body = 1 + key.size() + 1 + value.size() + 1;
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) len = std::to_string(len).size() + body;
  return std::to_string(len) + " " + std::string(key) + "=" + std::string(value) + "\n";
}

}  // namespace

Result<void> TarWriter::WriteHeader(const TarEntry& e) {
  std::map<std::string, std::string> pax;
  if (e.name.size() > kName.len) pax["path"] = e.name;
  if (e.linkname.size() > kLinkname.len) pax["linkpath"] = e.linkname;
  if (e.uid > OctalMax(kUid)) pax["uid"] = std::to_string(e.uid);
  if (e.gid > OctalMax(kGid)) pax["gid"] = std::to_string(e.gid);
  if (e.size > OctalMax(kSize)) pax["size"] = std::to_string(e.size);
  const bool mtime_fits = e.mtime >= 0 && static_cast<uint64_t>(e.mtime) <= OctalMax(kMtime);
  if (!mtime_fits) pax["mtime"] = std::to_string(e.mtime);
  for (const auto& [k, v] : e.xattrs) pax["SCHILY.xattr." + k] = v;
  char block[kBlock];
  if (!pax.empty()) {
    std::string records;
    for (const auto& [k, v] : pax) records += PaxRecord(k, v);
    FillHeader(block, "././@PaxHeader", 'x', 0644, 0, 0, records.size(), 0, "");
    if (auto ok = out_.Write({block, kBlock}); !ok) return ok;
    if (auto ok = out_.Write(records); !ok) return ok;
    if (auto ok = Pad(records.size()); !ok) return ok;
  }
  FillHeader(block, e.name, TypeFlag(e.type), e.mode & 07777,
             e.uid > OctalMax(kUid) ? 0 : e.uid, e.gid > OctalMax(kGid) ? 0 : e.gid,
             e.size > OctalMax(kSize) ? 0 : e.size,
             mtime_fits ? static_cast<uint64_t>(e.mtime) : 0, e.linkname);
  return out_.Write({block, kBlock});
}

Result<void> TarWriter::Pad(uint64_t size) {
  static constexpr char kZeros[kBlock] = {};
  const uint64_t pad = (kBlock - size % kBlock) % kBlock;
  if (pad == 0) return Ok{};
  return out_.Write({kZeros, static_cast<size_t>(pad)});
}

Result<void> TarWriter::Finish() {
  static constexpr char kZeros[2 * kBlock] = {};
  return out_.Write({kZeros, sizeof kZeros});
}

}  // namespace sandstream::image
