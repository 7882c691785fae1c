// The single ErrorCode -> HTTP status table (spec/errors.md), for a node's answers in every
// dialect and for a gateway's own.
#pragma once

#include <ostream>  // Boost 1.81's http/status.hpp uses it without including it

#include <boost/beast/http/status.hpp>

#include "base/error.h"

namespace sandstream::http {

boost::beast::http::status StatusFor(ErrorCode code);

}  // namespace sandstream::http
