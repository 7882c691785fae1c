// The spawner's request decoder (it runs with the keeper's privileges): any message and any
// number of fds. What it accepts points only inside the message and the fds it was given, and
// encodes back to the very same bytes.
#include <linux/filter.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "sandbox/spawn_request.h"
#include "sandbox/spawner.h"

namespace sandstream::sandbox {
namespace {

// A NUL-terminated string that lies wholly inside [begin, end).
bool Inside(const char* s, const char* begin, const char* end) {
  return s != nullptr && s >= begin && s < end && std::memchr(s, '\0', end - s) != nullptr;
}

std::vector<std::string> Strings(char* const* v, const char* begin, const char* end) {
  std::vector<std::string> out;
  for (; *v != nullptr; ++v) {
    FUZZ_CHECK(Inside(*v, begin, end));
    out.emplace_back(*v);
  }
  return out;
}

}  // namespace
}  // namespace sandstream::sandbox

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandstream::sandbox;
  if (size < 1) return 0;
  // The first byte says how many fds came with the message, and whether one is invalid.
  const size_t fd_count = data[0] % (kMaxSpawnFds + 2);
  const bool bad_fd = (data[0] & 0x80) != 0;
  ++data;
  --size;
  std::vector<int> fds(fd_count);
  for (size_t i = 0; i < fd_count; ++i) fds[i] = static_cast<int>(10 + i);
  if (bad_fd && fd_count > 0) fds[fd_count - 1] = -1;

  // Exactly `size` bytes, so that ASan sees a read past them; pointer-aligned (new[] is 16-byte
  // aligned), as the spawner receives a message.
  std::unique_ptr<char[]> buf(new char[size + (size == 0)]);
  std::memcpy(buf.get(), data, size);
  ParsedSpawnRequest out;
  if (!ParseSpawnRequest(buf.get(), size, fds.data(), fds.size(), &out)) return 0;
  const char* begin = buf.get();
  const char* end = begin + size;
  const LaunchSpec& l = out.launch;
  FUZZ_CHECK(Inside(l.cwd, begin, end) && l.cwd[0] == '/');
  if (l.search_path) FUZZ_CHECK(Inside(l.search_path, begin, end));
  const auto argv = Strings(l.argv, begin, end);
  const auto env = Strings(l.envp, begin, end);
  FUZZ_CHECK(!argv.empty());
  if (!l.search_path) FUZZ_CHECK(argv[0].find('/') != std::string::npos);
  FUZZ_CHECK(out.filter.len >= 1 && out.filter.len <= kMaxSeccompInstructions);
  FUZZ_CHECK(reinterpret_cast<const char*>(out.filter.filter) >= begin &&
             reinterpret_cast<const char*>(out.filter.filter + out.filter.len) <= end);
  FUZZ_CHECK(out.held_count <= kMaxHeldFds);
  FUZZ_CHECK(out.held + out.held_count == fds.data() + fds.size());
  for (int fd : {l.stdout_fd, l.stderr_fd, l.report_fd, out.exit_fd}) FUZZ_CHECK(fd >= 0);

  SpawnRequest again;
  again.argv = argv;
  again.env = env;
  again.cwd = l.cwd;
  if (l.search_path) again.search_path = std::string(l.search_path);
  again.uid = l.uid;
  again.gid = l.gid;
  again.open_files = l.open_files;
  again.seccomp = &out.filter;
  again.tty = l.tty;
  again.has_stdin = l.stdin_fd >= 0;
  again.held = out.held_count;
  again.tag = out.tag;
  auto encoded = EncodeSpawnRequest(again);
  FUZZ_CHECK(encoded.ok());
  // The argv and envp slots held zeros when sent; the parser filled them in place.
  std::string sent(reinterpret_cast<const char*>(data), size);
  const size_t slots = sizeof(SpawnRequestHeader) + size_t{out.filter.len} * sizeof(sock_filter);
  const size_t slot_bytes = (argv.size() + env.size() + 2) * sizeof(char*);
  FUZZ_CHECK(slots + slot_bytes <= size);
  FUZZ_CHECK(encoded->size() == size);
  FUZZ_CHECK(std::memcmp(encoded->data(), sent.data(), slots) == 0);
  FUZZ_CHECK(std::memcmp(encoded->data() + slots + slot_bytes, sent.data() + slots + slot_bytes,
                         size - slots - slot_bytes) == 0);
  return 0;
}
