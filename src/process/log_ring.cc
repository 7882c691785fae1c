#include "process/log_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

namespace sandstream {

namespace {

constexpr size_t kHeaderPage = 4096;
constexpr size_t kMinRoom = 16u << 10;

size_t RoundToPage(size_t n) { return (n + kHeaderPage - 1) & ~(kHeaderPage - 1); }

// A SIGKILL may stop the writer between any two of its stores to the ring, and the next daemon
// finds them as they were: they must reach the mapping in program order. Only the compiler could
// reorder them (the pages are the same memory for every process), so a compiler fence suffices.
void InOrder() { std::atomic_signal_fence(std::memory_order_seq_cst); }

}  // namespace

LogRing::LogRing(LogRing&& other) noexcept
    : fd_(std::move(other.fd_)),
      base_(std::exchange(other.base_, nullptr)),
      mapped_(std::exchange(other.mapped_, 0)),
      state_(std::exchange(other.state_, nullptr)),
      data_(std::exchange(other.data_, nullptr)) {}

LogRing& LogRing::operator=(LogRing&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, mapped_);
    fd_ = std::move(other.fd_);
    base_ = std::exchange(other.base_, nullptr);
    mapped_ = std::exchange(other.mapped_, 0);
    state_ = std::exchange(other.state_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

LogRing::~LogRing() {
  if (base_ != nullptr) ::munmap(base_, mapped_);
}

Result<void> LogRing::Map(size_t bytes) {
  const int flags = fd_ ? MAP_SHARED : (MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, fd_ ? fd_.get() : -1, 0);
  if (p == MAP_FAILED) return SysError(ErrorCode::kInternal, "log ring: mmap", errno);
  base_ = static_cast<char*>(p);
  mapped_ = bytes;
  state_ = reinterpret_cast<RingState*>(base_);
  data_ = base_ + kHeaderPage;
  return Ok{};
}

Result<LogRing> LogRing::Create(size_t capacity, bool shared) {
  LogRing ring;
  const size_t cap = RoundToPage(std::max(capacity, kHeaderPage));
  if (shared) {
    ring.fd_.reset(::memfd_create("sandstream-log", MFD_CLOEXEC));
    if (!ring.fd_) return SysError(ErrorCode::kInternal, "log ring: memfd_create", errno);
    if (::ftruncate(ring.fd_.get(), static_cast<off_t>(kHeaderPage + cap)) != 0) {
      return SysError(ErrorCode::kInternal, "log ring: ftruncate", errno);
    }
  }
  if (auto r = ring.Map(kHeaderPage + cap); !r) return std::move(r).error();
  RingState& s = *ring.state_;
  s = RingState{};
  s.magic = kMagic;
  s.version = kVersion;
  s.capacity = cap;
  s.next_seq = 1;
  return ring;
}

Result<LogRing> LogRing::Open(UniqueFd memfd) {
  LogRing ring;
  struct stat st {};
  if (::fstat(memfd.get(), &st) != 0) return SysError(ErrorCode::kInternal, "log ring: fstat", errno);
  const auto size = static_cast<size_t>(st.st_size);
  if (size < 2 * kHeaderPage) return Error{ErrorCode::kInvalidRequest, "log ring: too small"};
  ring.fd_ = std::move(memfd);
  if (auto r = ring.Map(size); !r) return std::move(r).error();
  const RingState& s = *ring.state_;
  const bool sane = s.magic == kMagic && s.version == kVersion &&
                    s.capacity == size - kHeaderPage && s.head <= s.tail &&
                    s.tail - s.head <= s.capacity && s.carry_len[0] <= 4 && s.carry_len[1] <= 4;
  if (!sane) return Error{ErrorCode::kInvalidRequest, "log ring: not a log ring (or a newer one)"};
  return ring;
}

bool LogRing::WrapFor(uint64_t need) {
  RingState& s = *state_;
  const uint64_t to_end = s.capacity - s.tail % s.capacity;
  if (to_end >= need) return true;
  // The record would cross the ring's end: the rest of it is filler, and the record starts
  // at the beginning. A filler too short for a header needs none: readers skip it alike.
  if (s.capacity - (s.tail - s.head) < to_end + need) return false;
  if (to_end >= sizeof(RingRecord)) {
    RingRecord wrap{};
    wrap.kind = kWrap;
    wrap.len = static_cast<uint32_t>(to_end - sizeof(RingRecord));
    std::memcpy(At(s.tail), &wrap, sizeof wrap);
  }
  s.tail += to_end;
  return true;
}

bool LogRing::Fits(size_t n) {
  if (!WrapFor(Span(n))) return false;
  const RingState& s = *state_;
  const uint64_t free = s.capacity - (s.tail - s.head);
  const uint64_t to_end = s.capacity - s.tail % s.capacity;
  return std::min(free, to_end) >= Span(n);
}

std::span<char> LogRing::Room(size_t want, bool whole) {
  state_->intake.armed = 0;
  InOrder();
  const size_t need = whole ? want : std::min(want, kMinRoom);
  if (!Fits(need)) return {};
  const RingState& s = *state_;
  const uint64_t room = std::min(s.capacity - (s.tail - s.head), s.capacity - s.tail % s.capacity);
  const size_t bytes = std::min<uint64_t>(want, room - sizeof(RingRecord)) & ~size_t{7};
  return {At(s.tail) + sizeof(RingRecord), whole ? want : std::max(bytes, need)};
}

std::pair<std::string_view, uint64_t> LogRing::Commit(uint64_t seq, uint64_t offset,
                                                      int64_t time_ns, uint8_t kind, size_t n) {
  RingState& s = *state_;
  if (n == 0) (void)WrapFor(Span(0));
  RingRecord r{};
  r.seq = seq;
  r.offset = offset;
  r.time_ns = time_ns;
  r.len = static_cast<uint32_t>(n);
  r.kind = kind;
  const uint64_t pos = s.tail;
  char* at = At(pos);
  std::memcpy(at, &r, sizeof r);
  InOrder();
  s.tail = pos + Span(n);
  return {std::string_view(at + sizeof r, n), pos};
}

ssize_t LogRing::Fill(std::span<char> room, RingIntake intake, int fd, bool pipe) {
  char* dest = room.data() + intake.carry_len;
  const size_t max = room.size() - intake.carry_len;
  if (!fd_ || !pipe) return fd < 0 ? 0 : ::read(fd, dest, max);
  // The file position first, then the record that makes it count (Room() ended the last one): a
  // crash in between leaves no record, and a crash after it leaves the position where the bytes
  // start.
  if (::lseek(fd_.get(), FileOffset(dest), SEEK_SET) < 0) return -1;
  RingIntake& recorded = state_->intake;
  intake.at = state_->tail;
  intake.armed = 0;
  recorded = intake;
  InOrder();
  recorded.armed = 1;
  InOrder();
  return fd < 0 ? 0 : ::splice(fd, nullptr, fd_.get(), nullptr, max, SPLICE_F_NONBLOCK);
}

std::optional<LogRing::Cut> LogRing::Interrupted() {
  const RingState& s = *state_;
  const RingIntake& in = s.intake;
  if (!fd_ || in.armed == 0 || in.at != s.tail) return {};
  // The room Fill() was given starts after the header of the record to come at the tail.
  char* room = At(s.tail) + sizeof(RingRecord);
  const uint64_t fits = std::min(s.capacity - (s.tail - s.head), s.capacity - s.tail % s.capacity);
  const off_t start = FileOffset(room) + in.carry_len;
  const off_t end = FileOffset(At(s.tail)) + static_cast<off_t>(fits);
  const off_t moved_to = ::lseek(fd_.get(), 0, SEEK_CUR);
  if (fits < sizeof(RingRecord) + in.carry_len || moved_to < start || moved_to > end) return {};
  return Cut{in, {room, static_cast<size_t>(moved_to - FileOffset(room))}};
}

void LogRing::PopFront() {
  RingState& s = *state_;
  while (s.head < s.tail) {
    const uint64_t to_end = s.capacity - s.head % s.capacity;
    if (to_end < sizeof(RingRecord)) {
      s.head += to_end;
      continue;
    }
    RingRecord r;
    std::memcpy(&r, At(s.head), sizeof r);
    s.head += r.kind == kWrap ? sizeof r + r.len : Span(r.len);
    if (r.kind != kWrap) return;
  }
}

void LogRing::ForEach(
    const std::function<void(const RingRecord&, std::string_view, uint64_t pos)>& f) const {
  const RingState& s = *state_;
  uint64_t pos = s.head;
  while (pos < s.tail) {
    const uint64_t to_end = s.capacity - pos % s.capacity;
    if (to_end < sizeof(RingRecord)) {
      pos += to_end;
      continue;
    }
    RingRecord r;
    std::memcpy(&r, At(pos), sizeof r);
    const uint64_t span = r.kind == kWrap ? sizeof r + r.len : Span(r.len);
    // A record that does not fit what the ring says it holds was torn by a crash: stop there.
    if (span > s.tail - pos || (r.kind != kWrap && span > to_end)) return;
    if (r.kind != kWrap) f(r, std::string_view(At(pos) + sizeof r, r.len), pos);
    pos += span;
  }
}

}  // namespace sandstream
