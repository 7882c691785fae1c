// The two CRIU images that name what a sandbox is to the host, rewritten for another sandbox
// restored from the same checkpoint (a fork, a sandbox of a memory snapshot): its user
// namespace's id maps (userns-*.img: the host ids its ids 0.. are) and its hostname
// (utsns-*.img). Every other image is the same for both: CRIU writes ids as the sandbox sees
// them, and pids are its own pid namespace's.
//
// An image is CRIU's common magic, the image's magic, then entries, each a little-endian u32
// length and a protobuf message (images/userns.proto, images/utsns.proto of CRIU 4).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace sandstream::sandbox {

// `image` (a userns-*.img) with each id map extent whose host ids start at `from` starting at
// `to` instead: the host ids of a sandbox whose range starts at `from` become those of one whose
// range starts at `to`. kInvalidRequest when it is not such an image or an extent lies outside
// [from, from + count).
Result<std::string> ShiftUsernsImage(std::string_view image, uint32_t from, uint32_t to,
                                     uint32_t count);

// `image` (a utsns-*.img) with its nodename `hostname`; its domain name kept.
Result<std::string> RenameUtsImage(std::string_view image, std::string_view hostname);

}  // namespace sandstream::sandbox
