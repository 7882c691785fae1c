#include "sandbox/criu_images.h"

#include <optional>
#include <utility>

namespace sandstream::sandbox {
namespace {

constexpr uint32_t kCommonMagic = 0x54564319;
constexpr uint32_t kUsernsMagic = 0x55474906;
constexpr uint32_t kUtsnsMagic = 0x54473203;

// The protobuf wire types these messages use.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

uint32_t ReadU32(std::string_view s) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[i]);
  return v;
}

void AppendU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void AppendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// One field of a message: its number, wire type, and value (a varint's, or the bytes of the
// others).
struct Field {
  uint32_t number = 0;
  uint32_t type = 0;
  uint64_t varint = 0;
  std::string_view bytes;
};

// Reads the fields of one message in order; nullopt at its end, or `bad` set for a malformed one.
class FieldReader {
 public:
  explicit FieldReader(std::string_view message) : rest_(message) {}
  bool bad() const { return bad_; }

  std::optional<Field> Next() {
    if (rest_.empty() || bad_) return std::nullopt;
    auto key = Varint();
    if (!key) return Fail();
    Field f;
    f.number = static_cast<uint32_t>(*key >> 3);
    f.type = static_cast<uint32_t>(*key & 7);
    switch (f.type) {
      case kVarint: {
        auto v = Varint();
        if (!v) return Fail();
        f.varint = *v;
        return f;
      }
      case kLengthDelimited: {
        auto n = Varint();
        if (!n || *n > rest_.size()) return Fail();
        f.bytes = rest_.substr(0, *n);
        rest_.remove_prefix(*n);
        return f;
      }
      case kFixed64:
      case kFixed32: {
        const size_t n = f.type == kFixed64 ? 8 : 4;
        if (rest_.size() < n) return Fail();
        f.bytes = rest_.substr(0, n);
        rest_.remove_prefix(n);
        return f;
      }
      default:
        return Fail();
    }
  }

 private:
  std::optional<uint64_t> Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && !rest_.empty(); shift += 7) {
      const auto byte = static_cast<uint8_t>(rest_.front());
      rest_.remove_prefix(1);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return v;
    }
    return std::nullopt;
  }
  std::optional<Field> Fail() {
    bad_ = true;
    return std::nullopt;
  }

  std::string_view rest_;
  bool bad_ = false;
};

void AppendField(std::string& out, const Field& f) {
  AppendVarint(out, (static_cast<uint64_t>(f.number) << 3) | f.type);
  if (f.type == kVarint) {
    AppendVarint(out, f.varint);
    return;
  }
  if (f.type == kLengthDelimited) AppendVarint(out, f.bytes.size());
  out.append(f.bytes);
}

Error Malformed(std::string_view what) {
  return Error{ErrorCode::kInvalidRequest, "checkpoint: " + std::string(what) + " is malformed"};
}

// Each entry of image `image` (of magic `magic`) through `rewrite`, into a new image.
template <class Rewrite>
Result<std::string> RewriteEntries(std::string_view image, uint32_t magic, std::string_view what,
                                   Rewrite rewrite) {
  if (image.size() < 8 || ReadU32(image) != kCommonMagic || ReadU32(image.substr(4)) != magic) {
    return Error{ErrorCode::kInvalidRequest, "checkpoint: " + std::string(what) + " is not one"};
  }
  std::string out(image.substr(0, 8));
  std::string_view rest = image.substr(8);
  while (!rest.empty()) {
    if (rest.size() < 4) return Malformed(what);
    const uint32_t size = ReadU32(rest);
    rest.remove_prefix(4);
    if (size > rest.size()) return Malformed(what);
    Result<std::string> entry = rewrite(rest.substr(0, size));
    if (!entry) return std::move(entry).error();
    rest.remove_prefix(size);
    AppendU32(out, static_cast<uint32_t>(entry->size()));
    out += *entry;
  }
  return out;
}

}  // namespace

Result<std::string> ShiftUsernsImage(std::string_view image, uint32_t from, uint32_t to,
                                     uint32_t count) {
  constexpr std::string_view kWhat = "the user namespace image";
  // An extent: first (1), lower_first (2), count (3).
  const auto shift_extent = [&](std::string_view extent) -> Result<std::string> {
    std::string out;
    FieldReader fields(extent);
    while (auto f = fields.Next()) {
      if (f->number == 2 && f->type == kVarint) {
        if (f->varint < from || f->varint - from >= count) {
          return Error{ErrorCode::kInvalidRequest, "checkpoint: its user namespace maps host id " +
                                                       std::to_string(f->varint) +
                                                       ", outside the range it was made in"};
        }
        f->varint = f->varint - from + to;
      }
      AppendField(out, *f);
    }
    if (fields.bad()) return Malformed(kWhat);
    return out;
  };
  return RewriteEntries(image, kUsernsMagic, kWhat,
                        [&](std::string_view entry) -> Result<std::string> {
                          std::string out;
                          FieldReader fields(entry);
                          while (auto f = fields.Next()) {
                            // uid_map (1) and gid_map (2), each an extent.
                            if ((f->number == 1 || f->number == 2) && f->type == kLengthDelimited) {
                              Result<std::string> extent = shift_extent(f->bytes);
                              if (!extent) return std::move(extent).error();
                              Field shifted = *f;
                              shifted.bytes = *extent;
                              AppendField(out, shifted);
                              continue;
                            }
                            AppendField(out, *f);
                          }
                          if (fields.bad()) return Malformed(kWhat);
                          return out;
                        });
}

Result<std::string> RenameUtsImage(std::string_view image, std::string_view hostname) {
  constexpr std::string_view kWhat = "the uts namespace image";
  return RewriteEntries(image, kUtsnsMagic, kWhat,
                        [&](std::string_view entry) -> Result<std::string> {
                          std::string out;
                          FieldReader fields(entry);
                          while (auto f = fields.Next()) {
                            if (f->number == 1 && f->type == kLengthDelimited)
                              f->bytes = hostname;  // nodename
                            AppendField(out, *f);
                          }
                          if (fields.bad()) return Malformed(kWhat);
                          return out;
                        });
}

}  // namespace sandstream::sandbox
