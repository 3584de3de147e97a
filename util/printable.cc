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

bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      ++i;
      continue;
    }
    // The sequence's length and the range of its second byte (RFC 3629's table).
    size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;
    if (byte >= 0xc2 && byte <= 0xdf) {
      length = 2;
    } else if (byte >= 0xe0 && byte <= 0xef) {
      length = 3;
      if (byte == 0xe0) low = 0xa0;   // Overlong below U+0800.
      if (byte == 0xed) high = 0x9f;  // Surrogates U+D800..U+DFFF.
    } else if (byte >= 0xf0 && byte <= 0xf4) {
      length = 4;
      if (byte == 0xf0) low = 0x90;   // Overlong below U+10000.
      if (byte == 0xf4) high = 0x8f;  // Above U+10FFFF.
    } else {
      return false;
    }
    if (i + length > text.size()) return false;
    const auto second = static_cast<unsigned char>(text[i + 1]);
    if (second < low || second > high) return false;
    for (size_t k = 2; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if (next < 0x80 || next > 0xbf) return false;
    }
    i += length;
  }
  return true;
}

}  // namespace headroom
