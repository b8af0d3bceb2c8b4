// What a call throws, as text, for tests that check what an error says (header-only):
// - error_message<E>: the message of the E a call throws;
// - invalid_argument_message: the same for InvalidArgument, with a visible placeholder when
//   nothing is thrown;
// - contains: whether a message holds a part.
#pragma once

#include <functional>
#include <string>

#include "runtime/error.h"

namespace zs::testing {

// The message of the E that `fn` throws, or `if_none` ("" unless given) if it returns. Other
// exceptions propagate (gtest reports them).
template <typename E>
std::string error_message(const std::function<void()>& fn, const std::string& if_none = "") {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return if_none;
}

// The message of the InvalidArgument that `fn` throws; "<no InvalidArgument thrown>" if it
// returns, so the test's expectation on the text fails and shows that.
inline std::string invalid_argument_message(const std::function<void()>& fn) {
  return error_message<InvalidArgument>(fn, "<no InvalidArgument thrown>");
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace zs::testing
