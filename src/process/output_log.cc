#include "process/output_log.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace sandstream {

namespace {

constexpr size_t kFirstBlock = 4u << 10;
// A read gets a new block rather than a sliver of the old one's end.
constexpr size_t kMinRoom = 16u << 10;

// Freed large blocks, ready for the next loud process without new page faults.
struct Pool {
  std::vector<char*> free;
  ~Pool() {
    for (char* b : free) ::munmap(b, BlockStore::kLargeBlock);
  }
};
thread_local Pool pool;

}  // namespace

char* BlockStore::Allocate(size_t size) {
  if (size < kLargeBlock) return static_cast<char*>(::operator new(size));
  if (size == kLargeBlock && !pool.free.empty()) {
    char* b = pool.free.back();
    pool.free.pop_back();
    return b;
  }
  // Mapped, not from the heap: given back to the kernel when freed, whatever else the heap holds.
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return static_cast<char*>(p);
}

void BlockStore::Release(char* base, size_t size) {
  if (size < kLargeBlock) {
    ::operator delete(base);
    return;
  }
  if (size == kLargeBlock && pool.free.size() * kLargeBlock < kPoolBytes) {
    pool.free.push_back(base);
    return;
  }
  ::munmap(base, size);
}

BlockStore::~BlockStore() { Clear(); }

void BlockStore::Clear() {
  for (const Block& b : blocks_) Release(b.base, b.size);
  blocks_.clear();
  allocated_ = 0;
}

std::span<char> BlockStore::Room(size_t want, bool whole) {
  const size_t need = whole ? want : std::min(want, kMinRoom);
  if (blocks_.empty() || blocks_.back().size - blocks_.back().used < need) {
    // Blocks grow as a log gets louder; a quiet one never costs more than a small block.
    size_t size = blocks_.empty() ? kFirstBlock : std::min(kLargeBlock, blocks_.back().size * 4);
    size = std::max(size, need);
    blocks_.push_back(Block{Allocate(size), size, 0, next_id_++});
    allocated_ += size;
  }
  Block& b = blocks_.back();
  return {b.base + b.used, std::min(want, b.size - b.used)};
}

std::pair<std::string_view, uint64_t> BlockStore::Commit(size_t n) {
  if (n == 0) return {std::string_view(), blocks_.empty() ? 0 : blocks_.back().id};
  Block& b = blocks_.back();
  std::string_view view(b.base + b.used, n);
  b.used += n;
  return {view, b.id};
}

void BlockStore::FreeBefore(uint64_t block) {
  while (blocks_.size() > 1 && blocks_.front().id < block) {
    Release(blocks_.front().base, blocks_.front().size);
    allocated_ -= blocks_.front().size;
    blocks_.pop_front();
  }
}

uint64_t OutputLog::Append(EntryKind kind, std::string_view data, SystemTime time) {
  if (ended_) return 0;
  if (data.empty()) return Push(kind, {}, store_.Commit(0).second, time);
  std::span<char> room = store_.Room(data.size(), true);
  std::memcpy(room.data(), data.data(), data.size());
  return Commit(kind, data.size(), time);
}

uint64_t OutputLog::Commit(EntryKind kind, size_t n, SystemTime time) {
  if (ended_) return 0;
  auto [view, block] = store_.Commit(n);
  return Push(kind, view, block, time);
}

uint64_t OutputLog::Push(EntryKind kind, std::string_view data, uint64_t block, SystemTime time) {
  LogEntry e;
  e.seq = next_seq_++;
  e.kind = kind;
  e.time = time;
  e.data = data;
  e.block = block;
  e.offset = total_bytes_;
  total_bytes_ += data.size();
  if (e.seq == 1) first_entry_end_ = total_bytes_;
  retained_bytes_ += data.size();
  entries_.push_back(e);
  if (kind == EntryKind::kExit) ended_ = true;
  Evict();
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
  // Copy what is left into storage of its own size, so the blocks it shared are freed.
  std::vector<StoredEntry> kept;
  kept.reserve(entries_.size());
  for (const LogEntry& e : entries_) {
    kept.push_back(StoredEntry{e.seq, e.kind, e.time, std::string(e.data), e.offset});
  }
  entries_.clear();
  entries_.shrink_to_fit();
  store_.Clear();
  retained_bytes_ = 0;
  for (StoredEntry& s : kept) {
    std::string_view data;
    uint64_t block = 0;
    if (!s.data.empty()) {
      std::span<char> room = store_.Room(s.data.size(), true);
      std::memcpy(room.data(), s.data.data(), s.data.size());
      std::tie(data, block) = store_.Commit(s.data.size());
    }
    entries_.push_back(LogEntry{s.seq, s.kind, s.time, data, s.offset, block});
    retained_bytes_ += data.size();
  }
}

uint64_t OutputLog::KeptAfter() const {
  uint64_t kept = UINT64_MAX;
  for (const Hold& h : holds_) kept = std::min(kept, h.keep_after);
  return kept;
}

void OutputLog::Evict() {
  const uint64_t kept = KeptAfter();
  bool evicted = false;
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
    evicted = true;
  }
  if (evicted) store_.FreeBefore(entries_.front().block);
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
  auto it = std::upper_bound(entries_.begin(), entries_.end(), offset,
                             [](uint64_t off, const LogEntry& e) {
                               return off < e.offset + e.data.size();
                             });
  if (it == entries_.begin()) return fallback;
  return std::prev(it)->seq;
}

void OutputLog::Restore(std::vector<StoredEntry> entries) {
  for (auto& e : entries) {
    if (!entries_.empty() && e.seq <= entries_.back().seq) continue;
    next_seq_ = e.seq + 1;
    if (e.seq == 1) first_entry_end_ = e.offset + e.data.size();
    std::string_view data;
    uint64_t block = store_.Commit(0).second;
    if (!e.data.empty()) {
      std::span<char> room = store_.Room(e.data.size(), true);
      std::memcpy(room.data(), e.data.data(), e.data.size());
      std::tie(data, block) = store_.Commit(e.data.size());
    }
    retained_bytes_ += data.size();
    total_bytes_ = e.offset + data.size();
    if (e.kind == EntryKind::kExit) ended_ = true;
    entries_.push_back(LogEntry{e.seq, e.kind, e.time, data, e.offset, block});
  }
}

void OutputLog::AddListener(Listener* l) { listeners_.push_back(l); }

void OutputLog::RemoveListener(Listener* l) {
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), l), listeners_.end());
}

}  // namespace sandstream
