#include "util/printable.h"

#include <cstdio>

namespace headroom {
namespace {

// Returns how many bytes of the control character at text[i] there are: 1 for C0 and DEL,
// 2 for a UTF-8 encoded C1 control, 0 for none (or for a newline or tab when `keep_lines`).
size_t ControlLength(std::string_view text, size_t i, bool keep_lines = false) {
  const auto byte = static_cast<unsigned char>(text[i]);
  if (keep_lines && (byte == '\n' || byte == '\t')) return 0;
  if (byte < 0x20 || byte == 0x7f) return 1;
  if (byte == 0xc2 && i + 1 < text.size()) {
    const auto next = static_cast<unsigned char>(text[i + 1]);
    if (next >= 0x80 && next <= 0x9f) return 2;
  }
  return 0;
}

std::string Escaped(std::string_view text, bool keep_lines) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t control = ControlLength(text, i, keep_lines);
    if (control == 0) {
      out.push_back(text[i++]);
      continue;
    }
    for (size_t end = i + control; i < end; ++i) {
      char escape[5];
      std::snprintf(escape, sizeof(escape), "\\x%02x", static_cast<unsigned char>(text[i]));
      out += escape;
    }
  }
  return out;
}

}  // namespace

std::string Printable(std::string_view text) { return Escaped(text, /*keep_lines=*/false); }

std::string PrintableLines(std::string_view text) { return Escaped(text, /*keep_lines=*/true); }

bool HasControlCharacters(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (ControlLength(text, i) > 0) return true;
  }
  return false;
}

}  // namespace headroom
