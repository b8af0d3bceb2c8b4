// A small learnable English text for end-to-end training tests (header-only): short sentences
// built from a few names, verbs and places, so that a tiny GPT's loss falls quickly and
// predictably. The caller writes it to a scratch file (tests/support/scratch.h write_text).
#pragma once

#include <string>

namespace zs::testing {

// `lines` sentences, one per line (about 27 bytes each).
inline std::string learnable_corpus(int lines = 400) {
  std::string text;
  const char* names[] = {"the miller", "the baker", "the farmer", "a child", "the river"};
  const char* verbs[] = {"walks to", "looks at", "sings for", "waits by"};
  const char* places[] = {"the mill.", "the bridge.", "the old gate.", "the village."};
  for (int i = 0; i < lines; ++i) {
    text += names[i % 5];
    text += ' ';
    text += verbs[(i / 5) % 4];
    text += ' ';
    text += places[(i / 20) % 4];
    text += '\n';
  }
  return text;
}

}  // namespace zs::testing
