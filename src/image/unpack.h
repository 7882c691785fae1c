// Unpacks one layer's tar stream into an empty directory, as host root, from untrusted input.
// Nothing outside the directory is ever touched: every path is resolved beneath it with openat2
// and no symlink followed; names with `..`, device nodes, hard links out of the layer and
// sparse files are refused. Whiteouts become what overlayfs takes in a lower layer. A refused
// layer leaves a partial tree behind: the caller unpacks into a staging directory and removes it.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.h"
#include "image/stream.h"
#include "image/tar.h"

namespace sandstream::image {

// The xattr that marks an opaque directory for overlayfs mounted with `userxattr`.
inline constexpr char kOpaqueXattr[] = "user.overlay.opaque";
// The whiteout markers of OCI layers.
inline constexpr char kWhiteoutPrefix[] = ".wh.";
inline constexpr char kOpaqueMarker[] = ".wh..wh..opq";

struct UnpackLimits {
  uint64_t max_entries = 0;   // entries of this layer
  Budget* budget = nullptr;   // bytes the import may still unpack (files are checked against it
                              // before they are written)
};

// Unpacks every entry of `tar` beneath `root` (a directory fd). Errors name the entry, after
// the reader's `what`: "layer sha256:...: entry 'a/../b': path climbs out ('..')".
//  - regular files, directories, symlinks (targets stored as written, never followed), hard
//    links to an entry earlier in the layer, FIFOs; owners, modes (setuid, setgid and sticky
//    kept) and mtimes as the archive says; of the xattrs only security.capability, on files;
//  - `.wh.<name>` becomes a char device 0:0 <name>; `.wh..wh..opq` marks its directory opaque
//    (kOpaqueXattr = "y"); other `.wh..wh.` entries (aufs metadata) are skipped;
//  - a later entry replaces an earlier one of the same name, unless both are directories.
Result<void> UnpackLayer(TarReader& tar, int root, const std::string& what,
                         const UnpackLimits& limits);

}  // namespace sandstream::image
