// JSON string escaping for the hand-written JSON files of the runtime (the memory timeline, the
// trace): quotes, backslashes and control characters. Header-only; a pure function.
#pragma once

#include <cstdio>
#include <string>

namespace zs {

// `text` as the inside of a JSON string literal.
inline std::string json_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned>(c));
      out += code;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace zs
