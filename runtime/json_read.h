// Reading JSON that a user or a file hands zeroshard (DeepSpeed configs, --model-config,
// checkpoint meta.json) within bounds: nesting deeper than kMaxJsonDepth is refused while it is
// parsed, before any value of that depth exists (a deep document made the recursive parts of the
// JSON library — dump(), the messages that quote a value — overflow the stack), and a value
// quoted in a message is cut to a few lines (json_excerpt).
//
// Header-only over nlohmann::json; stateless, thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

#include "runtime/error.h"

namespace zs {

// Deeper than any configuration or metadata zeroshard reads (a DeepSpeed config nests 4).
inline constexpr int kMaxJsonDepth = 64;

// `text` parsed, or an `E` (InvalidArgument for what a user gives; CorruptCheckpoint for a
// checkpoint's metadata) "<what> nests deeper than 64 levels ..." for a document deeper than
// kMaxJsonDepth. Malformed text throws the library's own exceptions (nlohmann::json::
// parse_error, out_of_range for a number too large), for the caller to name.
template <class E = InvalidArgument>
nlohmann::json parse_json_bounded(const std::string& text, const std::string& what) {
  const auto bounded = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    const bool opens = event == nlohmann::json::parse_event_t::object_start ||
                       event == nlohmann::json::parse_event_t::array_start;
    if (opens && depth >= kMaxJsonDepth) {
      detail::throw_error<E>(__FILE__, __LINE__, what, " nests deeper than ", kMaxJsonDepth,
                             " levels of objects and arrays; no configuration or metadata "
                             "zeroshard reads does: check that this is the file you meant");
    }
    return true;
  };
  return nlohmann::json::parse(text, bounded);
}

// `value`'s JSON text for a message, cut to about `max_chars` characters ("…" and the full
// length after a cut).
inline std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 160) {
  std::string text = value.dump();
  if (text.size() <= max_chars) return text;
  const size_t full = text.size();
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
  text.resize(cut);
  return text + "… (" + std::to_string(full) + " characters)";
}

}  // namespace zs
