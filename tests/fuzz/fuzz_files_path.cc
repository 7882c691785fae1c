// The files API's handling of a client's path before any file is touched: normalization inside
// the sandbox's root (never above it), and the download headers a path becomes, which must stay
// printable ASCII, one field a line, whatever bytes a file's name holds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "api/common/files.h"
#include "check.h"
#include "sandbox/files.h"

namespace sandstream {
namespace {

// The components of `path` that name something ("", "." dropped, ".." kept).
std::vector<std::string_view> Components(std::string_view path) {
  std::vector<std::string_view> out;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    const std::string_view part = path.substr(0, slash);
    path.remove_prefix(slash == std::string_view::npos ? path.size() : slash + 1);
    if (!part.empty() && part != ".") out.push_back(part);
  }
  return out;
}

// Whether `path` climbs above the root at some point.
bool Climbs(std::string_view path) {
  int depth = 0;
  for (const auto part : Components(path)) {
    depth += part == ".." ? -1 : 1;
    if (depth < 0) return true;
  }
  return false;
}

void CheckNormalized(std::string_view path) {
  auto normal = sandbox::NormalizeSandboxPath(path);
  const bool acceptable = !path.empty() && path[0] == '/' &&
                          path.find('\0') == std::string_view::npos && path.size() <= 4096 &&
                          !Climbs(path);
  FUZZ_CHECK(normal.ok() == acceptable);
  if (!normal) return;
  const std::string& n = *normal;
  FUZZ_CHECK(!n.empty() && n[0] == '/' && n.size() <= path.size());
  FUZZ_CHECK(n == "/" || n.back() != '/');
  for (const auto part : Components(n)) FUZZ_CHECK(part != "..");
  FUZZ_CHECK(n.find("//") == std::string::npos);
  auto again = sandbox::NormalizeSandboxPath(n);
  FUZZ_CHECK(again && *again == n);
}

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void CheckDownloadHeaders(std::string_view path) {
  const std::string headers = api::DownloadHeaders(path);
  FUZZ_CHECK(headers.ends_with("\r\n"));
  std::string_view rest(headers);
  while (!rest.empty()) {
    const size_t end = rest.find("\r\n");
    FUZZ_CHECK(end != std::string_view::npos);
    const std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end + 2);
    const size_t colon = line.find(": ");
    FUZZ_CHECK(colon != std::string_view::npos && colon > 0);
    for (const char c : line) FUZZ_CHECK(c >= 0x20 && c < 0x7f);
    if (line.starts_with("X-File-Path: ")) {
      std::string decoded;
      const std::string_view value = line.substr(colon + 2);
      for (size_t i = 0; i < value.size(); ++i) {
        if (value[i] != '%') {
          decoded += value[i];
          continue;
        }
        FUZZ_CHECK(i + 2 < value.size() && Hex(value[i + 1]) >= 0 && Hex(value[i + 2]) >= 0);
        decoded += static_cast<char>(Hex(value[i + 1]) * 16 + Hex(value[i + 2]));
        i += 2;
      }
      FUZZ_CHECK(decoded == path);
    }
  }
  const std::string_view type = api::MimeType(path);
  FUZZ_CHECK(headers.starts_with("Content-Type: " + std::string(type) + "\r\n"));
}

}  // namespace
}  // namespace sandstream

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view path(reinterpret_cast<const char*>(data), size);
  sandstream::CheckNormalized(path);
  sandstream::CheckDownloadHeaders(path);
  return 0;
}
