// Prometheus's text exposition format (0.0.4), for a node's /metrics and a gateway's.
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace sandstream::http {

inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

class PrometheusText {
 public:
  using Label = std::pair<std::string_view, std::string_view>;

  // A family's HELP and TYPE lines ("gauge", "counter", "histogram"); its samples follow.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // One sample of the family last begun (`name` with a suffix for a histogram's); label
  // values are escaped here.
  void Sample(std::string_view name, std::initializer_list<Label> labels, double value) {
    Sample(name, std::span<const Label>(labels.begin(), labels.size()), value);
  }
  void Sample(std::string_view name, std::span<const Label> labels, double value);
  // A family of one sample without labels.
  void Single(std::string_view name, std::string_view type, std::string_view help, double value);

  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace sandstream::http
