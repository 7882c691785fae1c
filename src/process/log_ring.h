// Where an output log's entries live: records (a fixed header, then the bytes) in a ring of
// memory, with the ring's state in a header page in front of it. Backed by a memfd, the ring
// outlives the daemon: a daemon that starts again maps the same memfd (kept for it by the
// sandbox's keeper) and finds every retained entry with its sequence number and offset, and the
// output a crash cut on its way in from a pipe. No I/O beyond the mapping and its memfd, no Asio.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>

#include "base/result.h"
#include "platform/unique_fd.h"

namespace sandstream {

// One record as the ring holds it; the bytes follow, padded to 8.
struct RingRecord {
  uint64_t seq;
  uint64_t offset;   // output bytes of the whole log before this entry
  int64_t time_ns;   // since the Unix epoch
  uint32_t len;
  uint8_t kind;      // EntryKind, or kWrap: the rest of the ring's end is unused
  uint8_t pad[3];
};
static_assert(sizeof(RingRecord) == 32);

// Output on its way from a pipe into the ring (LogRing::Fill): what a daemon that adopts the ring
// after a crash needs to commit the bytes that left the pipe but have no record yet.
struct RingIntake {
  uint64_t at;      // the tail when it began: it is over once the tail has moved on
  int64_t time_ns;  // for the entry
  uint8_t armed;    // 0: none (what a ring that never had one holds)
  uint8_t kind;
  uint8_t carry_len;  // the stream's carry, the room's first bytes: the pipe's follow them
  uint8_t pad[5];
};
static_assert(sizeof(RingIntake) == 24);

// The header page: everything a restarted daemon needs besides the records. Written with plain
// stores after each change; `tail` last, so a record is visible only once it is whole.
struct RingState {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t capacity;  // bytes of the ring after the header page
  uint64_t head;      // ring position (monotonic) of the oldest record
  uint64_t tail;      // ring position after the newest record
  uint64_t next_seq;
  uint64_t total_bytes;
  uint64_t first_entry_end;
  uint64_t evicted_entries;
  uint64_t evicted_bytes;
  uint32_t ended;
  // An incomplete UTF-8 sequence per stream (stdout, stderr), read but not yet an entry.
  uint8_t carry_len[2];
  uint8_t carry[2][4];
  // Added after version 1 without a new version: where version 1 rings hold zeros, so each
  // version adopts the other's rings (one that does not know it loses only the cut output).
  RingIntake intake;
};

class LogRing {
 public:
  static constexpr uint8_t kWrap = 0xFF;
  static constexpr uint64_t kMagic = 0x31474e49524c5353;  // "SSLRING1"
  static constexpr uint32_t kVersion = 1;

  // A new, empty ring of at least `capacity` bytes; in a memfd when `shared` (its fd() can be
  // handed to another process), else anonymous memory.
  static Result<LogRing> Create(size_t capacity, bool shared);
  // The ring of a memfd written by an earlier daemon; kInvalidRequest if it is not one.
  static Result<LogRing> Open(UniqueFd memfd);

  LogRing() = default;
  LogRing(LogRing&& other) noexcept;
  LogRing& operator=(LogRing&& other) noexcept;
  ~LogRing();

  bool valid() const { return base_ != nullptr; }
  int fd() const { return fd_.get(); }
  RingState& state() { return *state_; }
  const RingState& state() const { return *state_; }
  uint64_t capacity() const { return state_->capacity; }
  uint64_t used() const { return state_->tail - state_->head; }

  // Whether a record of `n` bytes fits now (wrapping the tail to the start if it must).
  bool Fits(size_t n);
  // Contiguous room for a record's bytes at the tail: at most `want`, and all of it when
  // `whole`, else at least min(want, 16 KiB). Empty when the ring has not that much free.
  // Ends the intake recorded in the header, if any: the caller may write over its bytes.
  std::span<char> Room(size_t want, bool whole);
  // Moves up to the rest of `room` (the last Room(), whose first bytes are the intake's carry)
  // from `fd`, non-blocking. From a pipe into a memfd the bytes move with splice(2), which
  // advances the memfd's file position (shared with the keeper's fd) in the same step, after
  // `intake` is recorded in the header: a crash at any point leaves the ring knowing what moved
  // (Interrupted()). Anything else is read(2), unrecorded. `fd` -1 moves nothing: the intake is
  // its carry alone. Returns what the call returned (-1 with errno set).
  ssize_t Fill(std::span<char> room, RingIntake intake, int fd, bool pipe);
  // The recorded intake a crash cut before its record was committed, with its bytes (the
  // carry's, then those that left the pipe) at the tail; nullopt when there is none.
  struct Cut {
    RingIntake intake;
    std::span<char> bytes;
  };
  std::optional<Cut> Interrupted();
  // Appends a record whose bytes are the first `n` of the last Room() (no Room() needed for
  // n == 0); returns a view of them and the record's position.
  std::pair<std::string_view, uint64_t> Commit(uint64_t seq, uint64_t offset, int64_t time_ns,
                                               uint8_t kind, size_t n);
  // Drops the oldest record.
  void PopFront();
  // Every record from the oldest, with a view of its bytes; for a daemon that adopts a ring.
  void ForEach(const std::function<void(const RingRecord&, std::string_view, uint64_t pos)>& f)
      const;

 private:
  // Bytes a record of `n` bytes takes, header and padding included.
  static uint64_t Span(size_t n) { return sizeof(RingRecord) + ((n + 7) & ~size_t{7}); }
  char* At(uint64_t pos) const { return data_ + pos % state_->capacity; }
  // Where a byte of the mapping is in the memfd.
  off_t FileOffset(const char* p) const { return p - base_; }
  // Moves the tail past the ring's end when a record of `need` bytes would not fit before it.
  bool WrapFor(uint64_t need);
  Result<void> Map(size_t bytes);

  UniqueFd fd_;
  char* base_ = nullptr;
  size_t mapped_ = 0;
  RingState* state_ = nullptr;
  char* data_ = nullptr;
};

}  // namespace sandstream
