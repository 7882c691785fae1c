// Directory trees under an fd, never leaving it: opening beneath a directory without following
// any symlink, and removing a whole tree. The image store's only ways into the trees it writes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "platform/unique_fd.h"

namespace sandstream::image {

// openat2 of `path` ("" is `dir` itself) beneath `dir` with RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV: a symlink anywhere on the way,
// the last component included, is ELOOP. Returns -1 with errno set on failure.
UniqueFd OpenBeneath(int dir, std::string_view path, int flags);

// The names in the directory `dir` (an fd open for reading), "." and ".." left out.
Result<std::vector<std::string>> ListDir(int dir);

// Removes `name` in `dir`: a file, or a directory with everything below it; nothing below is
// followed through a symlink. A missing `name` is fine. Errors name `shown`.
Result<void> RemoveTree(int dir, const std::string& name, std::string_view shown);

// A directory named by a random hex id, made (0700) in `dir`.
Result<std::string> MakeRandomDir(int dir, std::string_view what);

}  // namespace sandstream::image
