// Text from elsewhere (a job's name, a server's error message) made safe to print on a
// terminal: control characters, which could move the cursor, recolour or retitle the
// terminal, or hide what precedes them, are written as escapes instead.
#ifndef HEADROOM_UTIL_PRINTABLE_H_
#define HEADROOM_UTIL_PRINTABLE_H_

#include <string>
#include <string_view>

namespace headroom {

// Returns `text` with each C0 control byte (below 0x20, tab and newline included), DEL
// (0x7f) and each UTF-8 encoded C1 control (U+0080 to U+009F, e.g. the one-byte CSI)
// written as \xNN (a C1 control as its two bytes); every other byte, valid UTF-8 or not, is
// kept.
std::string Printable(std::string_view text);

// Returns Printable(text) but with newlines and tabs kept: for a message of several lines.
std::string PrintableLines(std::string_view text);

// Returns whether Printable(text) would change `text`.
bool HasControlCharacters(std::string_view text);

// Returns whether `text` is well-formed UTF-8 (no stray continuation or truncated sequence,
// no overlong form, surrogate or code point above U+10FFFF): what a protobuf `string` field
// must hold to parse in proto3.
bool IsValidUtf8(std::string_view text);

}  // namespace headroom

#endif  // HEADROOM_UTIL_PRINTABLE_H_
