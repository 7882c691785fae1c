#include "process/output_log.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "base/utf8.h"

namespace sandstream {

namespace {

// Beyond the window: two reads that overshoot it, a terminal's or pipe's last words after the
// exit, and the filler of a wrap.
constexpr size_t kRingHeadroom = 2u << 20;
constexpr size_t kRecordCost = sizeof(RingRecord) + 8;

size_t Capacity(const LogLimits& limits) {
  return limits.max_bytes + limits.max_entries * kRecordCost + kRingHeadroom;
}

int64_t Nanos(SystemTime t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

SystemTime FromNanos(int64_t ns) {
  return SystemTime(std::chrono::duration_cast<SystemTime::duration>(std::chrono::nanoseconds(ns)));
}

int StreamOf(EntryKind kind) {
  return kind == EntryKind::kStderr ? 1 : 0;
}

LogRing NewRing(size_t capacity, bool persistent) {
  auto ring = LogRing::Create(capacity, persistent);
  if (!ring) throw std::runtime_error(ring.error().message);
  return std::move(*ring);
}

}  // namespace

OutputLog::OutputLog(LogLimits limits, bool persistent) : limits_(limits) {
  if (persistent) EnsureRing(true);
}

Result<std::unique_ptr<OutputLog>> OutputLog::Adopt(LogLimits limits, UniqueFd ring_fd) {
  auto ring = LogRing::Open(std::move(ring_fd));
  if (!ring) return std::move(ring).error();
  auto log = std::make_unique<OutputLog>(limits);
  log->ring_ = std::move(*ring);
  const RingState& s = log->ring_.state();
  log->next_seq_ = s.next_seq;
  log->total_bytes_ = s.total_bytes;
  log->first_entry_end_ = s.first_entry_end;
  log->evicted_entries_ = s.evicted_entries;
  log->evicted_bytes_ = s.evicted_bytes;
  log->ended_ = s.ended != 0;
  log->ring_.ForEach([&](const RingRecord& r, std::string_view data, uint64_t) {
    log->entries_.push_back(
        LogEntry{r.seq, static_cast<EntryKind>(r.kind), FromNanos(r.time_ns), data, r.offset});
    log->retained_bytes_ += data.size();
    // A record written just before a crash, ahead of the counters that follow it.
    log->next_seq_ = std::max(log->next_seq_, r.seq + 1);
    log->total_bytes_ = std::max(log->total_bytes_, r.offset + data.size());
    if (r.kind == static_cast<uint8_t>(EntryKind::kExit)) log->ended_ = true;
  });
  if (auto cut = log->ring_.Interrupted()) {
    log->Settle(cut->intake, {cut->bytes.data(), cut->bytes.size()}, false);
  }
  return log;
}

void OutputLog::TakeFrom(OutputLog&& other) {
  limits_ = other.limits_;
  ring_ = std::move(other.ring_);
  entries_ = std::move(other.entries_);
  next_seq_ = other.next_seq_;
  total_bytes_ = other.total_bytes_;
  first_entry_end_ = other.first_entry_end_;
  retained_bytes_ = other.retained_bytes_;
  evicted_entries_ = other.evicted_entries_;
  evicted_bytes_ = other.evicted_bytes_;
  ended_ = other.ended_;
}

void OutputLog::EnsureRing(bool persistent) {
  if (!ring_.valid()) ring_ = NewRing(Capacity(limits_), persistent);
}

std::span<char> OutputLog::Room(size_t want) {
  EnsureRing(false);
  if (!ring_.Fits(std::min<size_t>(want, 16u << 10))) MakeRoom(std::min<size_t>(want, 16u << 10));
  return ring_.Room(want, false);
}

void OutputLog::MakeRoom(size_t n) {
  // The window and its headroom fit the ring; only output past them (a pipe's last words
  // after the exit, held back by a reader) can fill it. Then the oldest entries go anyway.
  bool forced = false;
  while (!ring_.Fits(n) && entries_.size() > 1) {
    const LogEntry& old = entries_.front();
    retained_bytes_ -= old.data.size();
    evicted_bytes_ += old.data.size();
    ++evicted_entries_;
    entries_.pop_front();
    ring_.PopFront();
    forced = true;
  }
  if (forced) SaveState();
}

std::string_view OutputLog::carry(EntryKind kind) const {
  if (!ring_.valid()) return {};
  const RingState& s = ring_.state();
  const int stream = StreamOf(kind);
  return {reinterpret_cast<const char*>(s.carry[stream]), s.carry_len[stream]};
}

void OutputLog::set_carry(EntryKind kind, std::string_view bytes) {
  RingState& s = ring_.state();
  const int stream = StreamOf(kind);
  if (!bytes.empty()) std::memcpy(s.carry[stream], bytes.data(), bytes.size());
  s.carry_len[stream] = static_cast<uint8_t>(bytes.size());
}

std::pair<RingIntake, std::span<char>> OutputLog::BeginIntake(EntryKind kind, size_t want) {
  const std::string_view carry = this->carry(kind);
  RingIntake intake{};
  intake.time_ns = Nanos(SystemNow());
  intake.kind = static_cast<uint8_t>(kind);
  intake.carry_len = static_cast<uint8_t>(carry.size());
  std::span<char> room = Room(carry.size() + want);
  std::copy(carry.begin(), carry.end(), room.data());
  return {intake, room};
}

ssize_t OutputLog::Take(EntryKind kind, int fd, size_t want, bool pipe) {
  auto [intake, room] = BeginIntake(kind, want);
  const ssize_t n = ring_.Fill(room, intake, fd, pipe);
  if (n > 0) Settle(intake, {room.data(), intake.carry_len + static_cast<size_t>(n)}, false);
  return n;
}

void OutputLog::FlushCarry(EntryKind kind) {
  if (carry(kind).empty()) return;
  // An intake that takes nothing: cut by a crash before its entry, it leaves the carry as it was
  // (an incomplete sequence is held back again), for the next daemon's reader to flush.
  auto [intake, room] = BeginIntake(kind, 0);
  (void)ring_.Fill(room, intake, -1, true);
  Settle(intake, {room.data(), intake.carry_len}, true);
}

void OutputLog::Settle(const RingIntake& intake, std::string_view bytes, bool whole) {
  const auto kind = static_cast<EntryKind>(intake.kind);
  const size_t complete = whole ? bytes.size() : Utf8CompletePrefix(bytes);
  // The carry before the record: a crash between the two leaves the intake in the ring, and it
  // is settled again from there (the bytes are still at the tail).
  set_carry(kind, bytes.substr(complete));
  if (complete > 0 && !ended_) Push(kind, complete, FromNanos(intake.time_ns));
}

void OutputLog::SaveState() {
  if (!ring_.valid()) return;
  RingState& s = ring_.state();
  s.next_seq = next_seq_;
  s.total_bytes = total_bytes_;
  s.first_entry_end = first_entry_end_;
  s.evicted_entries = evicted_entries_;
  s.evicted_bytes = evicted_bytes_;
  s.ended = ended_ ? 1 : 0;
}

uint64_t OutputLog::Append(EntryKind kind, std::string_view data, SystemTime time) {
  if (ended_) return 0;
  EnsureRing(false);
  if (!data.empty()) {
    if (!ring_.Fits(data.size())) MakeRoom(data.size());
    if (!ring_.Fits(data.size())) return 0;  // larger than the whole ring: cannot be kept
    std::memcpy(ring_.Room(data.size(), true).data(), data.data(), data.size());
  }
  return Push(kind, data.size(), time);
}

uint64_t OutputLog::Push(EntryKind kind, size_t n, SystemTime time) {
  if (n == 0) MakeRoom(0);
  LogEntry e;
  e.seq = next_seq_++;
  e.kind = kind;
  e.time = time;
  e.offset = total_bytes_;
  e.data = ring_.Commit(e.seq, e.offset, Nanos(time), static_cast<uint8_t>(kind), n).first;
  total_bytes_ += n;
  if (e.seq == 1) first_entry_end_ = total_bytes_;
  retained_bytes_ += n;
  entries_.push_back(e);
  if (kind == EntryKind::kExit) ended_ = true;
  Evict();
  SaveState();
  // A listener may remove itself while being told; iterate over a copy.
  if (!listeners_.empty()) {
    auto copy = listeners_;
    for (Listener* l : copy) l->OnAppend();
  }
  return e.seq;
}

void OutputLog::Trim(uint64_t max_bytes) {
  holds_.clear();
  const LogLimits saved = limits_;
  limits_.max_bytes = std::min(limits_.max_bytes, max_bytes);
  Evict();
  limits_ = saved;
  // What is left goes into a ring of its own size (the window's memory, and the memfd a
  // keeper may hold, go).
  Rehome();
}

void OutputLog::Detach() {
  if (!ended_ || !ring_.valid() || ring_.fd() < 0) return;
  Rehome();
}

void OutputLog::Rehome() {
  // Ring to ring, both mappings: a copy through the heap would leave the allocator holding a
  // window's worth of freed memory.
  size_t bytes = 0;
  for (const LogEntry& e : entries_) bytes += e.data.size() + kRecordCost;
  LogRing ring = NewRing(bytes + 4096, false);
  std::deque<LogEntry> moved;
  for (const LogEntry& e : entries_) {
    if (!e.data.empty()) {
      std::memcpy(ring.Room(e.data.size(), true).data(), e.data.data(), e.data.size());
    }
    auto [view, pos] =
        ring.Commit(e.seq, e.offset, Nanos(e.time), static_cast<uint8_t>(e.kind), e.data.size());
    (void)pos;
    moved.push_back(LogEntry{e.seq, e.kind, e.time, view, e.offset});
  }
  entries_ = std::move(moved);
  ring_ = std::move(ring);
  SaveState();
}

void OutputLog::Refill(std::vector<StoredEntry> entries) {
  size_t bytes = 0;
  for (const auto& e : entries) bytes += e.data.size() + kRecordCost;
  ring_ = NewRing(bytes + 4096, false);
  for (auto& e : entries) {
    if (!e.data.empty()) {
      std::span<char> room = ring_.Room(e.data.size(), true);
      std::memcpy(room.data(), e.data.data(), e.data.size());
    }
    auto [view, pos] =
        ring_.Commit(e.seq, e.offset, Nanos(e.time), static_cast<uint8_t>(e.kind), e.data.size());
    (void)pos;
    entries_.push_back(LogEntry{e.seq, e.kind, e.time, view, e.offset});
    retained_bytes_ += view.size();
  }
}

uint64_t OutputLog::KeptAfter() const {
  uint64_t kept = UINT64_MAX;
  for (const Hold& h : holds_) kept = std::min(kept, h.keep_after);
  return kept;
}

void OutputLog::Evict() {
  const uint64_t kept = KeptAfter();
  // Never evict the newest entry: a reader must always be able to get the latest state.
  while (entries_.size() > 1 &&
         (retained_bytes_ > limits_.max_bytes || entries_.size() > limits_.max_entries) &&
         entries_.front().seq <= kept) {
    const LogEntry& old = entries_.front();
    retained_bytes_ -= old.data.size();
    evicted_bytes_ += old.data.size();
    ++evicted_entries_;
    if (evicted_ends_.size() == kEvictedIndex) evicted_ends_.pop_front();
    evicted_ends_.emplace_back(old.seq, old.offset + old.data.size());
    entries_.pop_front();
    ring_.PopFront();
  }
}

bool OutputLog::Full() const {
  if (holds_.empty() || entries_.empty()) return false;
  const bool over = retained_bytes_ > limits_.max_bytes || entries_.size() > limits_.max_entries;
  if (!over || entries_.front().seq <= KeptAfter()) return false;
  // Readers that have taken everything wait for the writer, not the other way round: what
  // they keep for a resume must never stop the output they are waiting for.
  const uint64_t last = last_seq();
  return std::any_of(holds_.begin(), holds_.end(),
                     [last](const Hold& h) { return h.taken_after < last; });
}

void OutputLog::Relieve(bool was_full) {
  Evict();
  if (was_full && !Full() && on_space_) on_space_();
}

OutputLog::HoldId OutputLog::AddHold(uint64_t keep_after, uint64_t taken_after, bool parked) {
  const bool was_full = Full();
  // A reader that comes back (or any new one) takes over from the readers that went away.
  if (!parked) std::erase_if(holds_, [](const Hold& h) { return h.parked; });
  const HoldId id = next_hold_++;
  holds_.push_back(Hold{id, std::min(keep_after, taken_after), taken_after, parked});
  Relieve(was_full);
  return id;
}

void OutputLog::RememberTaken(const Hold& h) {
  if (entries_.empty()) return;
  const uint64_t front = entries_.front().seq;
  for (uint64_t seq = std::max(h.keep_after, front); seq <= h.taken_after; ++seq) {
    if (seq < front || seq > entries_.back().seq) break;
    const LogEntry& e = entries_[static_cast<size_t>(seq - front)];
    taken_ends_[seq] = e.offset + e.data.size();
  }
  while (taken_ends_.size() > kTakenIndex) taken_ends_.erase(taken_ends_.begin());
}

void OutputLog::ReleaseHold(HoldId id) {
  for (const Hold& h : holds_) {
    if (h.id == id) RememberTaken(h);
  }
  RemoveHold(id);
}

std::optional<uint64_t> OutputLog::OffsetAfter(uint64_t seq) const {
  auto it = std::lower_bound(evicted_ends_.begin(), evicted_ends_.end(), seq,
                             [](const auto& e, uint64_t s) { return e.first < s; });
  if (it != evicted_ends_.end() && it->first == seq) return it->second;
  if (auto t = taken_ends_.find(seq); t != taken_ends_.end()) return t->second;
  return std::nullopt;
}

void OutputLog::MoveHold(HoldId id, uint64_t keep_after, uint64_t taken_after) {
  for (Hold& h : holds_) {
    if (h.id != id) continue;
    const bool was_full = Full();
    h.keep_after = std::max(h.keep_after, std::min(keep_after, taken_after));
    h.taken_after = std::max(h.taken_after, taken_after);
    Relieve(was_full);
    return;
  }
}

void OutputLog::RemoveHold(HoldId id) {
  const bool was_full = Full();
  if (std::erase_if(holds_, [id](const Hold& h) { return h.id == id; }) > 0) Relieve(was_full);
}

bool OutputLog::HasHold(HoldId id) const {
  return std::any_of(holds_.begin(), holds_.end(), [id](const Hold& h) { return h.id == id; });
}

size_t OutputLog::DropBlockingHolds() {
  if (entries_.empty()) return 0;
  const bool was_full = Full();
  const uint64_t front = entries_.front().seq;
  const uint64_t last = last_seq();
  const auto stalled = [front, last](const Hold& h) {
    return h.keep_after < front && h.taken_after < last;
  };
  for (const Hold& h : holds_) {
    if (stalled(h)) RememberTaken(h);
  }
  const size_t dropped = std::erase_if(holds_, stalled);
  if (dropped > 0) Relieve(was_full);
  return dropped;
}

OutputLog::Slice OutputLog::Read(uint64_t after_seq, uint64_t max_bytes,
                                 std::optional<uint64_t> known_offset) const {
  Slice slice;
  const uint64_t first = first_retained_seq();
  if (after_seq + 1 < first) {
    Gap gap{after_seq + 1, first - 1, std::nullopt};
    // A reader at the very start knows where it is without having said so; one that resumes
    // after a recently evicted entry is found in the index.
    if (!known_offset && after_seq == 0) known_offset = 0;
    if (!known_offset && after_seq == 1) known_offset = first_entry_end_;
    if (!known_offset) known_offset = OffsetAfter(after_seq);
    const uint64_t first_offset = entries_.empty() ? total_bytes_ : entries_.front().offset;
    if (known_offset) gap.bytes = first_offset - std::min(first_offset, *known_offset);
    slice.gap = gap;
    after_seq = first - 1;
  }
  if (entries_.empty() || after_seq >= entries_.back().seq) return slice;
  size_t index = static_cast<size_t>(after_seq + 1 - entries_.front().seq);
  uint64_t bytes = 0;
  for (; index < entries_.size(); ++index) {
    const LogEntry& e = entries_[index];
    if (!slice.entries.empty() && bytes + e.data.size() > max_bytes) break;
    bytes += e.data.size();
    slice.entries.push_back(&e);
  }
  return slice;
}

uint64_t OutputLog::SeqBeforeTail(uint64_t n) const {
  uint64_t chunks = 0;
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->kind == EntryKind::kStdout || it->kind == EntryKind::kStderr) {
      if (chunks == n) return it->seq;
      ++chunks;
    }
  }
  // Fewer than n chunks retained: everything, start included.
  return first_retained_seq() - 1;
}

uint64_t OutputLog::LastSeqEndingBy(uint64_t offset, uint64_t fallback) const {
  // Entries are in offset order: the first one ending past `offset`, then one back.
  auto it = std::upper_bound(
      entries_.begin(), entries_.end(), offset,
      [](uint64_t off, const LogEntry& e) { return off < e.offset + e.data.size(); });
  if (it == entries_.begin()) return fallback;
  return std::prev(it)->seq;
}

void OutputLog::Restore(std::vector<StoredEntry> entries) {
  std::vector<StoredEntry> kept;
  for (auto& e : entries) {
    if (!kept.empty() && e.seq <= kept.back().seq) continue;
    if (!entries_.empty() && e.seq <= entries_.back().seq) continue;
    next_seq_ = e.seq + 1;
    if (e.seq == 1) first_entry_end_ = e.offset + e.data.size();
    total_bytes_ = e.offset + e.data.size();
    if (e.kind == EntryKind::kExit) ended_ = true;
    kept.push_back(std::move(e));
  }
  Refill(std::move(kept));
  SaveState();
}

void OutputLog::AddListener(Listener* l) {
  listeners_.push_back(l);
}

void OutputLog::RemoveListener(Listener* l) {
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), l), listeners_.end());
}

}  // namespace sandstream
