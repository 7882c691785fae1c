// A process's output log: every chunk read from its pipes, sequence-numbered across both
// streams, in a bounded window. Readers are cursors (a sequence number); the writer never
// waits for them. A reader that falls out of the window learns exactly which entries it missed.
// Pure data structure: no I/O, no Asio; listeners are told of appends synchronously.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"

namespace sandstream {

enum class EntryKind : uint8_t { kStart, kStdout, kStderr, kExit };

struct LogEntry {
  uint64_t seq = 0;
  EntryKind kind = EntryKind::kStdout;
  SystemTime time;
  std::string data;     // output bytes (stdout/stderr); empty for start and exit
  uint64_t offset = 0;  // output bytes of the whole log that came before this entry
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

  explicit OutputLog(LogLimits limits = {}) : limits_(limits) {}
  OutputLog(const OutputLog&) = delete;
  OutputLog& operator=(const OutputLog&) = delete;

  // Appends an entry and evicts the oldest ones beyond the limits; returns its seq.
  // Appending after kExit is a bug and is ignored (returns 0).
  uint64_t Append(EntryKind kind, std::string_view data, SystemTime time = SystemNow());

  // The entries after `after_seq`, at most about `max_bytes` of output (at least one entry).
  // If some entries after `after_seq` were evicted, `gap` says which; `known_offset` is the
  // reader's output offset after `after_seq` if it knows it (so the gap's bytes are exact).
  struct Slice {
    std::optional<Gap> gap;
    std::vector<const LogEntry*> entries;
  };
  Slice Read(uint64_t after_seq, uint64_t max_bytes,
             std::optional<uint64_t> known_offset = std::nullopt) const;

  // Entries of the last `n` output chunks (start and exit included when retained).
  uint64_t SeqBeforeTail(uint64_t n) const;

  uint64_t last_seq() const { return next_seq_ - 1; }
  uint64_t next_seq() const { return next_seq_; }
  uint64_t first_retained_seq() const { return entries_.empty() ? next_seq_ : entries_.front().seq; }
  bool ended() const { return ended_; }
  uint64_t total_bytes() const { return total_bytes_; }
  uint64_t retained_bytes() const { return retained_bytes_; }
  uint64_t evicted_entries() const { return evicted_entries_; }
  uint64_t evicted_bytes() const { return evicted_bytes_; }
  const std::deque<LogEntry>& entries() const { return entries_; }

  // Evicts the oldest entries (never the newest) until at most `max_bytes` of output remain:
  // a finished process nobody reads keeps only its tail.
  void Trim(uint64_t max_bytes);
  size_t listener_count() const { return listeners_.size(); }

  // Refills a log from stored entries (a finished process after a restart); keeps their seqs.
  void Restore(std::vector<LogEntry> entries);

  void AddListener(Listener* l);
  void RemoveListener(Listener* l);

 private:
  void Evict();

  LogLimits limits_;
  std::deque<LogEntry> entries_;
  uint64_t next_seq_ = 1;
  uint64_t total_bytes_ = 0;
  uint64_t first_entry_end_ = 0;  // output offset after seq 1 (a process's `start`: 0)
  uint64_t retained_bytes_ = 0;
  uint64_t evicted_entries_ = 0;
  uint64_t evicted_bytes_ = 0;
  bool ended_ = false;
  std::vector<Listener*> listeners_;
};

}  // namespace sandstream
