// Finding lxcfs's mount (and its leftovers) in mountinfo.
#include "sandbox/limits_view.h"

#include <gtest/gtest.h>

namespace sandstream::sandbox {
namespace {

constexpr const char* kMountinfo =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "46 27 0:42 / /var/lib/sandstream/lxcfs rw,nosuid,nodev,relatime - fuse.lxcfs lxcfs "
    "rw,user_id=0,group_id=0,allow_other\n"
    "47 27 0:43 / /tmp/a\\040b/lxcfs rw,relatime - fuse.lxcfs lxcfs rw\n"
    "48 27 0:44 / /srv/other rw shared:5 - fuse.sshfs host:/ rw\n";

TEST(HasMountAt, FindsTheMountByPointAndType) {
  EXPECT_TRUE(HasMountAt(kMountinfo, "/var/lib/sandstream/lxcfs", "fuse.lxcfs"));
  EXPECT_TRUE(HasMountAt(kMountinfo, "/sys/fs/cgroup", "tmpfs"));
  EXPECT_FALSE(HasMountAt(kMountinfo, "/sys/fs/cgroup", "fuse.lxcfs"));
  EXPECT_FALSE(HasMountAt(kMountinfo, "/var/lib/sandstream", "fuse.lxcfs"));
  EXPECT_FALSE(HasMountAt(kMountinfo, "/srv/other", "fuse.lxcfs"));
  EXPECT_TRUE(HasMountAt(kMountinfo, "/srv/other", "fuse.sshfs"));  // optional fields
}

TEST(HasMountAt, ReadsEscapedPaths) {
  EXPECT_TRUE(HasMountAt(kMountinfo, "/tmp/a b/lxcfs", "fuse.lxcfs"));
  EXPECT_FALSE(HasMountAt(kMountinfo, "/tmp/a\\040b/lxcfs", "fuse.lxcfs"));
}

TEST(HasMountAt, IgnoresWhatIsNotAMountLine) {
  EXPECT_FALSE(HasMountAt("", "/", "tmpfs"));
  EXPECT_FALSE(HasMountAt("garbage\n1 2\n", "/", "tmpfs"));
  EXPECT_FALSE(HasMountAt("1 2 0:1 / /x rw\n", "/x", "tmpfs"));  // no " - "
}

}  // namespace
}  // namespace sandstream::sandbox
