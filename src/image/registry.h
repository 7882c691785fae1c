// Pulling images from a registry (the OCI distribution API, docker's registry v2): image
// references, and a client that fetches manifests and blobs, answering the registry's bearer
// token or basic auth challenge. HTTPS, or plain HTTP for the registries the operator names;
// every connection's address is checked before it is opened (a pull reaches public
// addresses only, unless the operator names the registry). Blocking: call it from a worker
// thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "image/manifest.h"

namespace sandstream::image {

// "[host[:port]/]repository[:tag][@sha256:...]" as docker reads it: the first part is a host
// when it has a '.' or a ':' or is "localhost"; without one the registry is Docker Hub, and a
// one-part repository there is under "library/" ("python:3.12" is
// registry-1.docker.io/library/python:3.12).
struct Reference {
  std::string host;        // host[:port] as written ("docker.io" for Docker Hub)
  std::string repository;  // "library/python"
  std::string tag;         // "latest" when neither a tag nor a digest is given
  std::string digest;      // "" unless the reference pins one

  // host[:port] the API is reached at (Docker Hub's is registry-1.docker.io).
  std::string ApiHost() const;
  // host/repository[:tag][@digest], the canonical form.
  std::string String() const;
};
Result<Reference> ParseReference(std::string_view text);

struct Credentials {
  std::string username;
  std::string password;
};

// Which registries a pull may reach, and how.
struct RegistryPolicy {
  // Not empty: the only registries (a reference's host[:port]) pulled from; others are refused
  // before anything is resolved. Realms and redirects are the registry's to choose.
  std::vector<std::string> allowed;
  // host[:port] entries (a host alone matches every port) reached over plain HTTP. They are
  // the operator's: they may be on any address.
  std::vector<std::string> plain_http;
  // host[:port] entries that may be on loopback, private or link-local addresses (over HTTPS).
  std::vector<std::string> private_hosts;
  // Whether a pull may connect to `ip` (text, IPv4 or IPv6) of a host in neither list.
  std::function<bool(std::string_view ip)> public_address;
  // Set: transfers in flight end with kShuttingDown.
  const std::atomic<bool>* stop = nullptr;
  double connect_timeout_seconds = 30;
  double stall_seconds = 60;  // a transfer that moves no byte for this long fails
  // A pull (every request of it, from the first) that takes longer fails, however steadily
  // its bytes come.
  double timeout_seconds = 1800;
};

// Whether `host_port` ("host:port", or "host" for the scheme's port) is named by `entries`.
bool HostListed(const std::vector<std::string>& entries, std::string_view host_port);

class Registry {
 public:
  Registry(Reference ref, Credentials credentials, RegistryPolicy policy);
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  const Reference& reference() const { return ref_; }

  struct Document {
    std::string media_type;  // the response's Content-Type
    std::string digest;      // of the content, as received
    std::string content;
  };
  // The manifest or index the reference names (by its digest when it pins one, else its tag).
  // A pinned digest is checked; kNotFound when the registry has no such image.
  Result<Document> Top();
  // The document `d` names (an index, a manifest, a config), checked against its size and
  // digest. `kind` names it in errors.
  Result<std::string> Fetch(const Descriptor& d, std::string_view kind);
  // The blob `d` names into `fd` (written from its offset): exactly d.size bytes, checked
  // against nothing else (the caller hashes it). `progress(bytes so far)` as it comes.
  Result<void> Download(const Descriptor& d, int fd, const std::function<void(uint64_t)>& progress);

  struct Http;  // the transfer's state (registry.cc)

 private:
  struct Response;
  // GET `path` (under /v2/<repository>/) with the auth it needs, redirects followed.
  Result<Response> Get(const std::string& path, const std::vector<std::string>& headers,
                       const std::function<Result<void>(std::string_view)>& sink);
  Result<void> Authenticate(const std::string& challenge);
  std::string Base() const;

  Reference ref_;
  Credentials credentials_;
  RegistryPolicy policy_;
  std::unique_ptr<Http> http_;
  std::string authorization_;  // the header a request to the registry carries, "" for none
};

}  // namespace sandstream::image
