#include "http/prometheus.h"

#include <cstdio>

namespace sandstream::http {

void PrometheusText::Family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += help;
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void PrometheusText::Sample(std::string_view name, std::span<const Label> labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    char sep = '{';
    for (const auto& [key, text] : labels) {
      out_ += sep;
      out_ += key;
      out_ += "=\"";
      for (char c : text) {
        if (c == '\\' || c == '"') {
          out_ += '\\';
          out_ += c;
        } else if (c == '\n') {
          out_ += "\\n";
        } else {
          out_ += c;
        }
      }
      out_ += '"';
      sep = ',';
    }
    out_ += '}';
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, " %.17g\n", value);
  out_ += buf;
}

void PrometheusText::Single(std::string_view name, std::string_view type, std::string_view help,
                            double value) {
  Family(name, type, help);
  Sample(name, {}, value);
}

}  // namespace sandstream::http
