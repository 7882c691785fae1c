// The registry client: libcurl's easy interface, one handle (its connections reused) per pull.
// Redirects are followed here, not by libcurl, so that each hop is checked against the policy
// and the registry's credentials never go to another host (blobs are often served from a CDN).
#include "image/registry.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <mutex>

#include <boost/json.hpp>

#include "base/base64.h"
#include "image/digest.h"
#include "platform/fd.h"

namespace sandstream::image {
namespace {

namespace json = boost::json;

constexpr std::string_view kDockerHub = "docker.io";
constexpr std::string_view kDockerHubApi = "registry-1.docker.io";
constexpr int kMaxRedirects = 5;
constexpr size_t kMaxErrorBody = 64 << 10;
constexpr size_t kMaxTokenBody = 1 << 20;

Error Invalid(std::string why) {
  return Error{ErrorCode::kInvalidRequest, std::move(why)};
}

bool ValidRepositoryPart(std::string_view part) {
  // OCI distribution: [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
  if (part.empty() || !std::isalnum(static_cast<unsigned char>(part.front())) ||
      !std::isalnum(static_cast<unsigned char>(part.back()))) {
    return false;
  }
  return std::all_of(part.begin(), part.end(), [](unsigned char c) {
    return std::islower(c) || std::isdigit(c) || c == '.' || c == '_' || c == '-';
  });
}

bool ValidTag(std::string_view tag) {
  // [A-Za-z0-9_][A-Za-z0-9._-]{0,127}
  if (tag.empty() || tag.size() > 128 || tag.front() == '.' || tag.front() == '-') return false;
  return std::all_of(tag.begin(), tag.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '.' || c == '-';
  });
}

bool ValidHost(std::string_view host) {
  return !host.empty() && host.size() <= 255 &&
         std::all_of(host.begin(), host.end(), [](unsigned char c) {
           return std::isalnum(c) || c == '.' || c == '-' || c == ':' || c == '[' || c == ']';
         });
}

void InitCurl() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// The first error a registry's JSON error body gives ("CODE: message"), or "".
std::string RegistryErrorText(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec || !v.is_object()) return "";
  const json::value* errors = v.as_object().if_contains("errors");
  if (!errors || !errors->is_array() || errors->as_array().empty()) return "";
  const json::value& first = errors->as_array().front();
  if (!first.is_object()) return "";
  std::string out;
  for (const char* key : {"code", "message"}) {
    const json::value* part = first.as_object().if_contains(key);
    if (part && part->is_string()) {
      out += (out.empty() ? "" : ": ") + std::string(part->as_string());
    }
  }
  return out.substr(0, 512);
}

// The parameters of a WWW-Authenticate challenge: `scheme` lower-cased, then key="value" pairs.
struct Challenge {
  std::string scheme;
  std::vector<std::pair<std::string, std::string>> params;
  std::string Param(std::string_view key) const {
    for (const auto& [k, v] : params) {
      if (k == key) return v;
    }
    return "";
  }
};

Challenge ParseChallenge(std::string_view text) {
  Challenge c;
  size_t at = 0;
  while (at < text.size() && text[at] != ' ') ++at;
  for (char ch : text.substr(0, at)) {
    c.scheme += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  while (at < text.size()) {
    while (at < text.size() && (text[at] == ' ' || text[at] == ',')) ++at;
    const size_t eq = text.find('=', at);
    if (eq == std::string_view::npos) break;
    std::string key(text.substr(at, eq - at));
    at = eq + 1;
    std::string value;
    if (at < text.size() && text[at] == '"') {
      for (++at; at < text.size() && text[at] != '"'; ++at) {
        if (text[at] == '\\' && at + 1 < text.size()) ++at;
        value += text[at];
      }
      ++at;
    } else {
      while (at < text.size() && text[at] != ',') value += text[at++];
    }
    c.params.emplace_back(std::move(key), std::move(value));
  }
  return c;
}

std::string AcceptManifests() {
  std::string accept = "Accept: ";
  for (std::string_view type :
       {kOciIndexType, kOciManifestType, kDockerManifestListType, kDockerManifestType}) {
    accept += std::string(type) + ", ";
  }
  accept.resize(accept.size() - 2);
  return accept;
}

// A sink that keeps at most `max` bytes in `out` (more is an error naming `what`).
std::function<Result<void>(std::string_view)> KeepUpTo(std::string& out, size_t max,
                                                      std::string what) {
  return [&out, max, what = std::move(what)](std::string_view chunk) -> Result<void> {
    if (out.size() + chunk.size() > max) {
      return Error{ErrorCode::kBadGateway,
                   what + ": larger than " + std::to_string(max) + " bytes"};
    }
    out.append(chunk);
    return Ok{};
  };
}

}  // namespace

std::string Reference::ApiHost() const {
  return host == kDockerHub ? std::string(kDockerHubApi) : host;
}

std::string Reference::String() const {
  std::string out = host + "/" + repository;
  if (!tag.empty()) out += ":" + tag;
  if (!digest.empty()) out += "@" + digest;
  return out;
}

Result<Reference> ParseReference(std::string_view text) {
  const std::string shown = "image reference '" + std::string(text.substr(0, 256)) + "'";
  if (text.empty() || text.size() > 1024) return Invalid(shown + ": empty or too long");
  Reference ref;
  std::string_view rest = text;
  if (const size_t at = rest.find('@'); at != std::string_view::npos) {
    ref.digest = std::string(rest.substr(at + 1));
    if (!ValidDigest(ref.digest)) return Invalid(shown + ": the digest is not sha256:<64 hex>");
    rest = rest.substr(0, at);
  }
  const size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    const std::string_view first = rest.substr(0, slash);
    if (first.find_first_of(".:") != std::string_view::npos || first == "localhost") {
      if (!ValidHost(first)) return Invalid(shown + ": bad registry host");
      ref.host = std::string(first);
      rest = rest.substr(slash + 1);
    }
  }
  if (ref.host.empty()) ref.host = std::string(kDockerHub);
  // The tag is after the last ':' that follows the last '/'.
  const size_t last_slash = rest.rfind('/');
  const size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos &&
      (last_slash == std::string_view::npos || colon > last_slash)) {
    ref.tag = std::string(rest.substr(colon + 1));
    if (!ValidTag(ref.tag)) return Invalid(shown + ": bad tag '" + ref.tag + "'");
    rest = rest.substr(0, colon);
  }
  if (rest.empty() || rest.size() > 255) return Invalid(shown + ": no repository");
  for (size_t at = 0; at <= rest.size();) {
    size_t end = rest.find('/', at);
    if (end == std::string_view::npos) end = rest.size();
    if (!ValidRepositoryPart(rest.substr(at, end - at))) {
      return Invalid(shown +
                     ": the repository must be lowercase letters, digits and . _ - "
                     "between slashes");
    }
    at = end + 1;
  }
  ref.repository = std::string(rest);
  if (ref.host == kDockerHub && ref.repository.find('/') == std::string::npos) {
    ref.repository = "library/" + ref.repository;
  }
  if (ref.tag.empty() && ref.digest.empty()) ref.tag = "latest";
  return ref;
}

bool HostListed(const std::vector<std::string>& entries, std::string_view host_port) {
  const size_t colon = host_port.rfind(':');
  const bool has_port = colon != std::string_view::npos && host_port.back() != ']';
  const std::string_view host = has_port ? host_port.substr(0, colon) : host_port;
  return std::any_of(entries.begin(), entries.end(),
                     [&](const std::string& e) { return e == host_port || e == host; });
}

// One easy handle and what the callbacks of a transfer share.
struct Registry::Http {
  CURL* curl = nullptr;
  const RegistryPolicy* policy = nullptr;
  std::chrono::steady_clock::time_point deadline;  // of the whole pull
  bool private_ok = false;      // this transfer's host may be on any address
  std::string refused_address;  // the address the policy refused, if it did
  std::optional<Error> sink_error;
  const std::function<Result<void>(std::string_view)>* sink = nullptr;
  std::string error_body;
  long status = 0;
  std::string content_type, docker_digest, www_authenticate;

  Http() {
    InitCurl();
    curl = curl_easy_init();
  }
  ~Http() {
    if (curl) curl_easy_cleanup(curl);
  }
};

struct Registry::Response {
  long status = 0;
  std::string content_type;
  std::string docker_digest;
};

namespace {

size_t OnHeader(char* data, size_t size, size_t count, void* p) {
  auto& http = *static_cast<Registry::Http*>(p);
  std::string_view line(data, size * count);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a 100, say): forget the last
    http.content_type.clear();
    http.docker_digest.clear();
    http.www_authenticate.clear();
    return line.size();
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return line.size();
  std::string name;
  for (char ch : line.substr(0, colon)) {
    name += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
    value.remove_suffix(1);
  }
  if (name == "content-type") http.content_type = std::string(value.substr(0, value.find(';')));
  if (name == "docker-content-digest") http.docker_digest = std::string(value);
  if (name == "www-authenticate" && http.www_authenticate.empty()) {
    http.www_authenticate = std::string(value);
  }
  return line.size();
}

size_t OnBody(char* data, size_t size, size_t count, void* p) {
  auto& http = *static_cast<Registry::Http*>(p);
  const std::string_view chunk(data, size * count);
  long status = 0;
  curl_easy_getinfo(http.curl, CURLINFO_RESPONSE_CODE, &status);
  if (status < 200 || status >= 300) {
    // An error's or a redirect's body: kept for the message, a little of it.
    const size_t room = kMaxErrorBody - std::min(kMaxErrorBody, http.error_body.size());
    http.error_body.append(chunk.substr(0, room));
    return chunk.size();
  }
  if (auto ok = (*http.sink)(chunk); !ok) {
    http.sink_error = std::move(ok).error();
    return CURL_WRITEFUNC_ERROR;
  }
  return chunk.size();
}

int OnProgress(void* p, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto& http = *static_cast<Registry::Http*>(p);
  return http.policy->stop && http.policy->stop->load() ? 1 : 0;
}

// Every socket the transfer opens: refused (no packet sent) when its address is not one the
// policy lets this host be at.
curl_socket_t OnOpenSocket(void* p, curlsocktype, curl_sockaddr* address) {
  auto& http = *static_cast<Registry::Http*>(p);
  char text[INET6_ADDRSTRLEN] = "";
  if (address->family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&address->addr)->sin_addr, text,
                sizeof text);
  } else if (address->family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&address->addr)->sin6_addr, text,
                sizeof text);
  }
  const bool allowed = http.private_ok ||
                       (*text && http.policy->public_address && http.policy->public_address(text));
  if (!allowed) {
    http.refused_address = *text ? text : "an address of another family";
    return CURL_SOCKET_BAD;
  }
  return ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

struct UrlParts {
  std::string scheme;
  std::string host_port;  // host, and ":port" when the URL names one
};

Result<UrlParts> SplitUrl(const std::string& url) {
  CURLU* u = curl_url();
  UrlParts parts;
  bool ok = curl_url_set(u, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK;
  for (auto [part, out] :
       {std::pair{CURLUPART_SCHEME, &parts.scheme}, std::pair{CURLUPART_HOST, &parts.host_port}}) {
    char* text = nullptr;
    if (ok && curl_url_get(u, part, &text, 0) == CURLUE_OK) {
      *out = text;
    } else {
      ok = false;
    }
    curl_free(text);
  }
  char* port = nullptr;
  if (ok && curl_url_get(u, CURLUPART_PORT, &port, 0) == CURLUE_OK)
    parts.host_port += ":" + std::string(port);
  curl_free(port);
  curl_url_cleanup(u);
  if (!ok) return Error{ErrorCode::kBadGateway, "not a URL: '" + url.substr(0, 200) + "'"};
  return parts;
}

std::string HostPortOf(const std::string& url) {
  auto parts = SplitUrl(url);
  return parts ? parts->host_port : "";
}

}  // namespace

Registry::Registry(Reference ref, Credentials credentials, RegistryPolicy policy)
    : ref_(std::move(ref)),
      credentials_(std::move(credentials)),
      policy_(std::move(policy)),
      http_(std::make_unique<Http>()) {
  http_->policy = &policy_;
  http_->deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(policy_.timeout_seconds));
}

Registry::~Registry() = default;

std::string Registry::Base() const {
  const std::string host = ref_.ApiHost();
  const char* scheme = HostListed(policy_.plain_http, host) ? "http://" : "https://";
  return scheme + host + "/v2/" + ref_.repository + "/";
}

// One GET of `url`, no redirect followed; the body to `sink` when the status is 2xx.
static Result<void> Send(Registry::Http& http, const std::string& url,
                         const std::vector<std::string>& headers,
                         const std::function<Result<void>(std::string_view)>& sink,
                         const std::string& what) {
  auto parts = SplitUrl(url);
  if (!parts) return Error{ErrorCode::kBadGateway, what + ": " + parts.error().message};
  const RegistryPolicy& policy = *http.policy;
  const auto overdue = [&] {
    return Error{ErrorCode::kBadGateway,
                 what + ": the pull took longer than pull_timeout_seconds (" +
                     std::to_string(static_cast<int64_t>(policy.timeout_seconds)) + ")"};
  };
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      http.deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return overdue();
  if (parts->scheme == "http") {
    if (!HostListed(policy.plain_http, parts->host_port)) {
      return Invalid(what + ": " + parts->host_port +
                     " is reached over plain HTTP only when registry_plain_http names it");
    }
  } else if (parts->scheme != "https") {
    return Error{ErrorCode::kBadGateway, what + ": scheme '" + parts->scheme + "' refused"};
  }
  http.private_ok = HostListed(policy.plain_http, parts->host_port) ||
                    HostListed(policy.private_hosts, parts->host_port);
  http.refused_address.clear();
  http.sink_error.reset();
  http.error_body.clear();
  http.sink = &sink;
  CURL* c = http.curl;
  curl_easy_reset(c);
  curl_slist* list = nullptr;
  for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_PROXY, "");  // no proxy from the environment
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "sandstream");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(policy.connect_timeout_seconds * 1000));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(policy.stall_seconds));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(left.count()));
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &http);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &http);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &http);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, OnOpenSocket);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &http);
  const auto started = std::chrono::steady_clock::now();
  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(list);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http.status);
  if (rc == CURLE_OK) return Ok{};
  if (http.sink_error) return *http.sink_error;
  if (!http.refused_address.empty()) {
    return Error{ErrorCode::kForbidden,
                 what + ": " + parts->host_port + " is at " + http.refused_address +
                     ", not a public address; a registry there is pulled from only when "
                     "registry_private_hosts (or registry_plain_http) names it"};
  }
  if (rc == CURLE_ABORTED_BY_CALLBACK && policy.stop && policy.stop->load()) {
    return Error{ErrorCode::kShuttingDown, what + ": sandstreamd is shutting down"};
  }
  // curl's own clock ends the transfer a moment before ours says the deadline has come.
  if (rc == CURLE_OPERATION_TIMEDOUT &&
      std::chrono::steady_clock::now() - started + std::chrono::milliseconds(100) >= left) {
    return overdue();
  }
  return Error{ErrorCode::kBadGateway, what + ": " + curl_easy_strerror(rc)};
}

Result<Registry::Response> Registry::Get(
    const std::string& path, const std::vector<std::string>& headers,
    const std::function<Result<void>(std::string_view)>& sink) {
  const std::string what = "registry " + ref_.host + ": GET " + path;
  if (!policy_.allowed.empty() && !HostListed(policy_.allowed, ref_.host) &&
      !HostListed(policy_.allowed, ref_.ApiHost())) {
    return Error{ErrorCode::kForbidden,
                 "registry " + ref_.host + " is not one this daemon pulls from (registry_allow)"};
  }
  std::string url = Base() + path;
  const std::string home = HostPortOf(url);
  bool authenticated = false;
  for (int hop = 0; hop <= kMaxRedirects;) {
    // The registry's credentials go to the registry only, never where it redirects.
    std::vector<std::string> sent = headers;
    const bool at_home = HostPortOf(url) == home;
    if (at_home && !authorization_.empty()) sent.push_back("Authorization: " + authorization_);
    if (auto ok = Send(*http_, url, sent, sink, what); !ok) return std::move(ok).error();
    const long status = http_->status;
    if (status >= 200 && status < 300) {
      return Response{status, http_->content_type, http_->docker_digest};
    }
    if (status == 401 && at_home && !authenticated && !http_->www_authenticate.empty()) {
      if (auto ok = Authenticate(http_->www_authenticate); !ok) return std::move(ok).error();
      authenticated = true;
      continue;
    }
    if (status >= 300 && status < 400) {
      char* next = nullptr;
      curl_easy_getinfo(http_->curl, CURLINFO_REDIRECT_URL, &next);
      if (!next)
        return Error{ErrorCode::kBadGateway,
                     what + ": HTTP " + std::to_string(status) + " without a Location"};
      url = next;
      ++hop;
      continue;
    }
    std::string detail = RegistryErrorText(http_->error_body);
    detail = detail.empty() ? "" : " (" + detail + ")";
    if (status == 401 || status == 403) {
      return Error{ErrorCode::kBadGateway,
                   what + ": HTTP " + std::to_string(status) + detail +
                       (credentials_.username.empty()
                            ? ": the registry wants credentials (auth.username, auth.password)"
                            : ": the registry refused the credentials")};
    }
    if (status == 404) {
      return Error{ErrorCode::kNotFound, what + ": not found" + detail};
    }
    return Error{ErrorCode::kBadGateway, what + ": HTTP " + std::to_string(status) + detail};
  }
  return Error{ErrorCode::kBadGateway,
               what + ": more than " + std::to_string(kMaxRedirects) + " redirects"};
}

Result<void> Registry::Authenticate(const std::string& header) {
  const Challenge challenge = ParseChallenge(header);
  const std::string what = "registry " + ref_.host + ": auth";
  std::string basic;
  if (!credentials_.username.empty()) {
    basic = "Basic " + Base64(credentials_.username + ":" + credentials_.password);
  }
  if (challenge.scheme == "basic") {
    if (basic.empty()) {
      return Error{ErrorCode::kBadGateway,
                   what + ": the registry wants credentials (auth.username, auth.password)"};
    }
    authorization_ = basic;
    return Ok{};
  }
  if (challenge.scheme != "bearer" || challenge.Param("realm").empty()) {
    return Error{ErrorCode::kBadGateway,
                 what + ": unsupported challenge '" + header.substr(0, 200) + "'"};
  }
  std::string url = challenge.Param("realm");
  std::string scope = challenge.Param("scope");
  if (scope.empty()) scope = "repository:" + ref_.repository + ":pull";
  const std::string service = challenge.Param("service");
  std::string query;
  using Param = std::pair<const char*, const std::string*>;
  for (auto [key, value] : {Param{"service", &service}, Param{"scope", &scope}}) {
    if (value->empty()) continue;
    char* escaped = curl_easy_escape(http_->curl, value->c_str(), static_cast<int>(value->size()));
    query += (query.empty() ? "" : "&") + std::string(key) + "=" + escaped;
    curl_free(escaped);
  }
  if (!query.empty()) url += (url.find('?') == std::string::npos ? "?" : "&") + query;
  std::string body;
  std::vector<std::string> headers;
  if (!basic.empty()) headers.push_back("Authorization: " + basic);
  const auto sink = KeepUpTo(body, kMaxTokenBody, what + ": the token response");
  if (auto ok = Send(*http_, url, headers, sink, what); !ok) return std::move(ok).error();
  if (http_->status != 200) {
    std::string detail = RegistryErrorText(http_->error_body);
    return Error{ErrorCode::kBadGateway,
                 what + ": the token service answered HTTP " + std::to_string(http_->status) +
                     (detail.empty() ? "" : " (" + detail + ")") +
                     (basic.empty() ? "" : ": the registry refused the credentials")};
  }
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  const json::object* o = !ec && v.is_object() ? &v.as_object() : nullptr;
  for (const char* key : {"token", "access_token"}) {
    const json::value* token = o ? o->if_contains(key) : nullptr;
    if (token && token->is_string() && !token->as_string().empty()) {
      authorization_ = "Bearer " + std::string(token->as_string());
      return Ok{};
    }
  }
  return Error{ErrorCode::kBadGateway, what + ": the token service's answer has no token"};
}

Result<Registry::Document> Registry::Top() {
  const std::string& name = ref_.digest.empty() ? ref_.tag : ref_.digest;
  Document doc;
  auto response = Get("manifests/" + name, {AcceptManifests()},
                      KeepUpTo(doc.content, kMaxDocumentBytes, "manifest " + name));
  if (!response) {
    if (response.error().code == ErrorCode::kNotFound) {
      return Error{ErrorCode::kNotFound, "registry " + ref_.host + " has no image " +
                                             ref_.String() + " (" + response.error().message + ")"};
    }
    return std::move(response).error();
  }
  doc.media_type = response->content_type;
  doc.digest = Sha256Of(doc.content);
  if (!ref_.digest.empty() && doc.digest != ref_.digest) {
    return Error{ErrorCode::kBadGateway, "registry " + ref_.host + ": the manifest of " +
                                             ref_.String() + " hashes to " + doc.digest};
  }
  return doc;
}

Result<std::string> Registry::Fetch(const Descriptor& d, std::string_view kind) {
  const std::string what = std::string(kind) + " " + d.digest;
  if (d.size > kMaxDocumentBytes) {
    return Error{ErrorCode::kInvalidRequest,
                 what + ": larger than " + std::to_string(kMaxDocumentBytes) + " bytes"};
  }
  std::string content;
  const bool is_blob = kind == "config";
  auto response = Get((is_blob ? "blobs/" : "manifests/") + d.digest,
                      is_blob ? std::vector<std::string>{} : std::vector{AcceptManifests()},
                      KeepUpTo(content, static_cast<size_t>(d.size), what));
  if (!response) return std::move(response).error();
  if (content.size() != d.size) {
    return Error{ErrorCode::kBadGateway, what +
                                             ": size mismatch: " + std::to_string(content.size()) +
                                             " bytes, " + std::to_string(d.size) + " expected"};
  }
  if (const std::string got = Sha256Of(content); got != d.digest) {
    return Error{ErrorCode::kBadGateway, what + ": digest mismatch: the blob hashes to " + got};
  }
  return content;
}

Result<void> Registry::Download(const Descriptor& d, int fd,
                                const std::function<void(uint64_t)>& progress) {
  const std::string what = "layer " + d.digest;
  uint64_t done = 0;
  const std::function<Result<void>(std::string_view)> sink =
      [&](std::string_view chunk) -> Result<void> {
    if (done + chunk.size() > d.size) {
      return Error{ErrorCode::kBadGateway,
                   what + ": the registry sent more than its " + std::to_string(d.size) + " bytes"};
    }
    if (auto ok = WriteAll(fd, chunk); !ok) {
      return Error{ok.error().code, what + ": " + ok.error().message};
    }
    done += chunk.size();
    if (progress) progress(done);
    return Ok{};
  };
  auto response = Get("blobs/" + d.digest, {}, sink);
  if (!response) {
    return Error{response.error().code, what + ": " + response.error().message};
  }
  if (done != d.size) {
    return Error{ErrorCode::kBadGateway, what + ": truncated: " + std::to_string(done) +
                                             " bytes of " + std::to_string(d.size)};
  }
  return Ok{};
}

}  // namespace sandstream::image
