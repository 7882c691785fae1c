// The sandbox's view of its own limits in /proc and /sys: lxcfs, a FUSE server that answers
// /proc/meminfo, cpuinfo, stat, uptime and /sys/devices/system/cpu/online from the cgroups of
// whoever reads them. sandstreamd starts it on demand at a directory of its own, restarts it if
// it dies, and leaves it running for the next daemon while sandboxes outlive this one. A
// sandbox gets read-only detached mounts of its files, attached over its own (mounts.h).
// Not thread-safe: the daemon's io_context thread only; it never waits on lxcfs itself.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/result.h"
#include "platform/unique_fd.h"
#include "sandbox/op.h"

namespace sandstream::sandbox {

// The files lxcfs serves that a sandbox sees, relative to its mount point and to the sandbox's
// root alike, in the order of LimitsView::Files.
inline constexpr const char* kViewFiles[] = {"proc/meminfo", "proc/cpuinfo", "proc/stat",
                                             "proc/uptime", "sys/devices/system/cpu/online"};
inline constexpr size_t kViewFileCount = std::size(kViewFiles);

class LimitsView {
 public:
  // `binary`: the lxcfs executable; `dir`: its mount point, with `dir`.pid and `dir`.log.
  LimitsView(std::string binary, std::string dir);
  LimitsView(const LimitsView&) = delete;
  LimitsView& operator=(const LimitsView&) = delete;

  // Read-only detached mounts (open_tree) of kViewFiles, made on a thread of their own, so that
  // a stuck lxcfs costs a thread and the sandbox its view, never the daemon's loop. Starts or
  // takes over lxcfs first if it is not serving.
  Op<Result<std::vector<UniqueFd>>> Files();
  // Ends the lxcfs this daemon started or took over: when no sandbox is left to need it.
  void Stop();

 private:
  Op<Result<void>> Ensure();
  Op<Result<void>> StartAndWait();
  bool Serving() const;  // lxcfs alive and its mount at dir_
  bool Adopt();          // an lxcfs an earlier daemon started, from its pidfile
  Result<void> Start();

  std::string binary_;
  std::string dir_;
  UniqueFd pidfd_;
  pid_t pid_ = -1;
  bool child_ = false;     // started by this daemon: reaped by it
  bool starting_ = false;  // a Create is waiting for it to mount: the others wait with it
};

// Whether /proc/self/mountinfo text has a mount of fstype `fstype` at `mountpoint`.
bool HasMountAt(const std::string& mountinfo, const std::string& mountpoint,
                const std::string& fstype);

}  // namespace sandstream::sandbox
