// A process's output log: every chunk read from its pipes, sequence-numbered across both
// streams, in a bounded window. Readers are cursors (a sequence number). A reader that skips
// never holds the writer back and learns exactly which entries it missed; a reader that waits
// places a hold, and while a hold keeps the window full the writer must pause (Full()).
// No I/O but Take()'s move of output into its storage, no Asio; listeners are told of appends
// synchronously.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/result.h"
#include "platform/unique_fd.h"
#include "process/log_ring.h"

namespace sandstream {

enum class EntryKind : uint8_t { kStart, kStdout, kStderr, kExit };

struct LogEntry {
  uint64_t seq = 0;
  EntryKind kind = EntryKind::kStdout;
  SystemTime time;
  std::string_view data;  // output bytes (stdout/stderr), in the log's storage; empty otherwise
  uint64_t offset = 0;    // output bytes of the whole log that came before this entry
};

// An entry with its own bytes: what the store keeps of a finished process.
struct StoredEntry {
  uint64_t seq = 0;
  EntryKind kind = EntryKind::kStdout;
  SystemTime time;
  std::string data;
  uint64_t offset = 0;
};

// Entries a reader can no longer get: `from_seq`..`to_seq`, `bytes` of output (when known).
struct Gap {
  uint64_t from_seq = 0;
  uint64_t to_seq = 0;
  std::optional<uint64_t> bytes;
};

struct LogLimits {
  uint64_t max_bytes = 8u << 20;   // output bytes retained
  uint64_t max_entries = 1u << 16; // entries retained (bounds per-entry overhead of tiny writes)
};

class OutputLog {
 public:
  class Listener {
   public:
    virtual void OnAppend() = 0;

   protected:
    virtual ~Listener() = default;
  };

  // `persistent`: the entries live in a memfd (ring_fd()) that another process can keep, so
  // that a daemon started again can Adopt() them.
  explicit OutputLog(LogLimits limits = {}, bool persistent = false);
  // A log whose entries an earlier daemon wrote into `ring`; its limits are `limits`.
  static Result<std::unique_ptr<OutputLog>> Adopt(LogLimits limits, UniqueFd ring);
  // Becomes `other` (a log just adopted), keeping this log's listeners (none, yet).
  void TakeFrom(OutputLog&& other);
  OutputLog(const OutputLog&) = delete;
  OutputLog& operator=(const OutputLog&) = delete;

  // Appends an entry (its bytes copied) and evicts the oldest ones beyond the limits that no
  // hold keeps; returns its seq. Appending after kExit is a bug and is ignored (returns 0).
  uint64_t Append(EntryKind kind, std::string_view data, SystemTime time = SystemNow());
  // Moves up to `want` bytes of output from `fd` (non-blocking) straight into the log's storage
  // as an entry of `kind` (kStdout or kStderr). A code point the bytes cut is held back as the
  // stream's carry, the first bytes of its next entry. From a pipe into a persistent log the move
  // and its entry survive a crash at any point: the next daemon's Adopt() commits what left the
  // pipe, once (LogRing::Fill). Returns what the read returned (-1 with errno set).
  ssize_t Take(EntryKind kind, int fd, size_t want, bool pipe = true);
  // The stream's carry as an entry of its own: the stream has ended.
  void FlushCarry(EntryKind kind);
  // The memfd of a persistent log (-1 otherwise), and the bytes of an incomplete UTF-8 sequence
  // that the stream's next entry begins with (kept in it, so they survive with it).
  int ring_fd() const { return ring_.valid() ? ring_.fd() : -1; }
  std::string_view carry(EntryKind kind) const;

  // The entries after `after_seq`, at most about `max_bytes` of output (at least one entry).
  // If some entries after `after_seq` were evicted, `gap` says which; `known_offset` is the
  // reader's output offset after `after_seq` if it knows it (so the gap's bytes are exact).
  // The pointers are valid until the next append, eviction or hold change.
  struct Slice {
    std::optional<Gap> gap;
    std::vector<const LogEntry*> entries;
  };
  Slice Read(uint64_t after_seq, uint64_t max_bytes,
             std::optional<uint64_t> known_offset = std::nullopt) const;

  // Entries of the last `n` output chunks (start and exit included when retained).
  uint64_t SeqBeforeTail(uint64_t n) const;
  // The seq of the newest retained entry that ends at or before output offset `offset`, or
  // `fallback` when there is none.
  uint64_t LastSeqEndingBy(uint64_t offset, uint64_t fallback) const;

  uint64_t last_seq() const { return next_seq_ - 1; }
  uint64_t next_seq() const { return next_seq_; }
  uint64_t first_retained_seq() const { return entries_.empty() ? next_seq_ : entries_.front().seq; }
  bool ended() const { return ended_; }
  uint64_t total_bytes() const { return total_bytes_; }
  uint64_t retained_bytes() const { return retained_bytes_; }
  uint64_t evicted_entries() const { return evicted_entries_; }
  uint64_t evicted_bytes() const { return evicted_bytes_; }
  // The ring's size (its pages are touched only as it fills).
  size_t allocated_bytes() const { return ring_.valid() ? ring_.capacity() : 0; }
  const LogLimits& limits() const { return limits_; }
  const std::deque<LogEntry>& entries() const { return entries_; }

  // Keeps at most `max_bytes` of output, the newest, in storage of just that size (not
  // persistent any more): a finished process nobody reads keeps only its tail. Holds are
  // dropped (nothing is written any more).
  void Trim(uint64_t max_bytes);
  // The log has ended: its entries move into memory of their own size, so that the memfd of a
  // persistent log (a descriptor, and a whole window's ring) goes with the process's exit.
  // Holds stay. Entry pointers from before are invalid.
  void Detach();
  size_t listener_count() const { return listeners_.size(); }

  // Refills a log from stored entries (a finished process after a restart); keeps their seqs.
  void Restore(std::vector<StoredEntry> entries);

  void AddListener(Listener* l);
  void RemoveListener(Listener* l);

  // ---- flow control ----
  // A hold is a waiting reader's place: it keeps every entry after `keep_after` from eviction,
  // and its reader has not yet taken the entries after `taken_after` (keep_after <= taken_after:
  // what lies between is kept so that a client cut off mid-way can resume). The log is Full()
  // while holds keep it over its limits and a holding reader still has entries to take: the
  // writer must stop reading until `on_space` is called. A parked hold belongs to a reader
  // whose client went away (it has taken nothing since); the next new hold replaces it.
  using HoldId = uint64_t;
  HoldId AddHold(uint64_t after_seq) { return AddHold(after_seq, after_seq, false); }
  HoldId AddHold(uint64_t keep_after, uint64_t taken_after, bool parked);
  void MoveHold(HoldId id, uint64_t keep_after, uint64_t taken_after);
  void RemoveHold(HoldId id);
  // Removes a hold whose client may come back later (a parked one whose grace passed): where
  // that client can resume from is remembered, so its gap is told in exact bytes.
  void ReleaseHold(HoldId id);
  bool HasHold(HoldId id) const;
  size_t hold_count() const { return holds_.size(); }
  // Drops the holds that keep the oldest entry and still have entries to take (their readers
  // stalled): they become skipping readers and see a gap. Returns how many were dropped.
  size_t DropBlockingHolds();
  bool Full() const;
  void set_on_space(std::function<void()> on_space) { on_space_ = std::move(on_space); }

 private:
  uint64_t Push(EntryKind kind, size_t n, SystemTime time);
  // Room for a record of up to `want` bytes at the tail (at least min(want, 16 KiB)).
  std::span<char> Room(size_t want);
  // Room at the tail for `want` bytes after the stream's carry, the carry copied there, and the
  // intake that says so.
  std::pair<RingIntake, std::span<char>> BeginIntake(EntryKind kind, size_t want);
  // Makes the intake's bytes (its carry, then what was taken) an entry: all of them when `whole`,
  // else all but a code point they cut, which becomes the carry.
  void Settle(const RingIntake& intake, std::string_view bytes, bool whole);
  void set_carry(EntryKind kind, std::string_view bytes);
  // A ring for these limits, the first time one is needed.
  void EnsureRing(bool persistent);
  // Makes room for a record of `n` bytes, evicting what holds keep if nothing else is left.
  void MakeRoom(size_t n);
  void SaveState();
  // Puts `entries` (in order, counters already set) into a ring of their own size.
  void Refill(std::vector<StoredEntry> entries);
  // Refills the log with its own entries: a ring of their size, not persistent.
  void Rehome();
  void Evict();
  // Evicts what it can; tells the writer when a full log got room.
  void Relieve(bool was_full);
  uint64_t KeptAfter() const;  // the lowest keep_after of the holds (UINT64_MAX: none)

  struct Hold {
    HoldId id;
    uint64_t keep_after;
    uint64_t taken_after;
    bool parked;
  };

  LogLimits limits_;
  LogRing ring_;
  std::deque<LogEntry> entries_;
  uint64_t next_seq_ = 1;
  uint64_t total_bytes_ = 0;
  uint64_t first_entry_end_ = 0;  // output offset after seq 1 (a process's `start`: 0)
  uint64_t retained_bytes_ = 0;
  uint64_t evicted_entries_ = 0;
  uint64_t evicted_bytes_ = 0;
  bool ended_ = false;
  std::vector<Listener*> listeners_;
  std::vector<Hold> holds_;
  HoldId next_hold_ = 1;
  // Remembers the output offset after each entry a released reader may resume from.
  void RememberTaken(const Hold& h);
  std::optional<uint64_t> OffsetAfter(uint64_t seq) const;

  // Seq -> output offset after it, for entries a reader may resume from once they are evicted:
  // the most recently evicted ones, and those a released reader had taken (its client's
  // Last-Event-ID is among them). A resume from one of them gets a gap in exact bytes.
  std::deque<std::pair<uint64_t, uint64_t>> evicted_ends_;
  std::map<uint64_t, uint64_t> taken_ends_;
  static constexpr size_t kEvictedIndex = 1024;
  static constexpr size_t kTakenIndex = 65536;
  std::function<void()> on_space_;
};

}  // namespace sandstream
