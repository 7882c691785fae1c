// pastabench: how long pasta takes, from exec to a usable network in an existing netns.
// Per iteration: a fresh named netns (not timed), then t0, spawn
//   pasta --runas 0 --config-net -f -4 -t none -u none -T none -U none --no-map-gw -i IF --netns PATH
// and poll, from a socket made inside the netns, until a UDP connect() to TARGET succeeds
// (i.e. the interface is up, addressed and has a default route): t1. Then kill pasta.
// Usage: pastabench ITER UPLINK_IF TARGET_IP
#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;
static double NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  const int iter = atoi(argv[1]);
  const std::string uplink = argv[2];
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(80);
  inet_pton(AF_INET, argv[3], &target.sin_addr);
  const int host = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  std::vector<double> ready;
  mkdir("/run/netns", 0755);
  for (int i = 0; i < iter; i++) {
    const std::string path = "/run/netns/nl-pasta-" + std::to_string(i);
    close(open(path.c_str(), O_CREAT | O_RDONLY, 0444));
    if (unshare(CLONE_NEWNET) != 0 || mount("/proc/thread-self/ns/net", path.c_str(), nullptr, MS_BIND, nullptr) != 0)
      return perror("netns"), 1;
    const int probe = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);  // lives in the new netns
    setns(host, CLONE_NEWNET);
    std::vector<std::string> args = {"/usr/bin/pasta", "--runas", "0", "--config-net", "-f", "-4", "-q",
                                     "-t", "none", "-u", "none", "-T", "none", "-U", "none",
                                     "--no-map-gw", "-i", uplink, "--netns", path};
    std::vector<char*> av;
    for (auto& a : args) av.push_back(a.data());
    av.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    const double t0 = NowUs();
    pid_t pid;
    if (posix_spawn(&pid, av[0], &fa, nullptr, av.data(), environ) != 0) return perror("spawn"), 1;
    double t1 = 0;
    while (NowUs() - t0 < 5e6) {
      if (connect(probe, (sockaddr*)&target, sizeof target) == 0) {
        t1 = NowUs();
        break;
      }
      usleep(50);
    }
    if (t1 == 0) return fprintf(stderr, "pasta not ready after 5 s\n"), 1;
    ready.push_back(t1 - t0);
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
    close(probe);
    umount2(path.c_str(), MNT_DETACH);
    unlink(path.c_str());
  }
  std::sort(ready.begin(), ready.end());
  printf("pasta ready: n=%zu median=%.1f us p90=%.1f us min=%.1f us\n", ready.size(), ready[ready.size() / 2],
         ready[ready.size() * 9 / 10], ready[0]);
  return 0;
}
