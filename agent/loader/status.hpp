// SPDX-License-Identifier: Apache-2.0
#pragma once
/// A recoverable error: what failed and the errno behind it (0 if none).

#include <string>

namespace iolens {

struct Status {
  bool ok = true;
  std::string message;
  int err = 0;

  static Status Ok() { return {}; }
  static Status Error(std::string what, int err = 0) { return Status{false, std::move(what), err}; }
  explicit operator bool() const { return ok; }
};

}  // namespace iolens
