// The interpreter drivers of code contexts: small programs run inside the sandbox (python3 -c,
// node -e) that execute cells in one persistent namespace and report results over a framed
// channel. See contexts.h for the protocol.
#pragma once

#include <string_view>

namespace sandstream {

extern const std::string_view kPythonDriver;
// What the Python driver runs first (context_charts.cc): `_chart_of(fig)`, the data of a
// matplotlib figure as a chart (type, title, axes, elements), or None.
extern const std::string_view kPythonCharts;
extern const std::string_view kNodeDriver;

}  // namespace sandstream
