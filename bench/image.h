// The image figure 10 imports: an OCI image layout, as a tar, of three layers made from the
// host's /bin/sh and head and the libraries they load (ldd): `sh -c 'echo hi'` runs in it.
#pragma once

#include <string>

namespace sandstream::bench {

// Layer 1: the libraries and the loader; layer 2: /bin/sh, /bin/head and a file layer 3 deletes; layer 3:
// /etc/os-release and the whiteout. Uncompressed layers (the import hashes and unpacks them
// once; what is timed is a sandbox's create).
std::string ShellImageArchive();

}  // namespace sandstream::bench
