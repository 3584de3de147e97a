#include "util/json_writer.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "util/check.h"

namespace headroom {

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  CHECK(scopes_.empty() || scopes_.back() == Scope::kArray) << "JSON value without a key";
  if (!scopes_.empty()) {
    if (has_element_.back()) out_ += ',';
    has_element_.back() = true;
  }
}

JsonWriter& JsonWriter::Open(Scope scope, char bracket) {
  BeforeValue();
  out_ += bracket;
  scopes_.push_back(scope);
  has_element_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::Close(Scope scope, char bracket) {
  // after_key_ is only ever set inside an object: a key without its value.
  CHECK(!scopes_.empty() && scopes_.back() == scope && !after_key_) << "unbalanced " << bracket;
  scopes_.pop_back();
  has_element_.pop_back();
  out_ += bracket;
  return *this;
}

JsonWriter& JsonWriter::BeginObject() { return Open(Scope::kObject, '{'); }
JsonWriter& JsonWriter::EndObject() { return Close(Scope::kObject, '}'); }
JsonWriter& JsonWriter::BeginArray() { return Open(Scope::kArray, '['); }
JsonWriter& JsonWriter::EndArray() { return Close(Scope::kArray, ']'); }

JsonWriter& JsonWriter::Key(std::string_view key) {
  CHECK(!scopes_.empty() && scopes_.back() == Scope::kObject && !after_key_)
      << "JSON key outside an object";
  if (has_element_.back()) out_ += ',';
  has_element_.back() = true;
  AppendEscaped(key);
  out_ += ':';
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::String(std::string_view value) {
  BeforeValue();
  AppendEscaped(value);
  return *this;
}

JsonWriter& JsonWriter::Uint(uint64_t value) {
  BeforeValue();
  absl::StrAppend(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t value) {
  BeforeValue();
  absl::StrAppend(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Double(double value) {
  BeforeValue();
  if (!std::isfinite(value)) {
    out_ += "null";
    return *this;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  out_ += buffer;
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  BeforeValue();
  out_ += value ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::Null() {
  BeforeValue();
  out_ += "null";
  return *this;
}

void JsonWriter::AppendEscaped(std::string_view s) {
  out_ += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out_ += "\\\"";
        break;
      case '\\':
        out_ += "\\\\";
        break;
      case '\n':
        out_ += "\\n";
        break;
      case '\r':
        out_ += "\\r";
        break;
      case '\t':
        out_ += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
          out_ += buffer;
        } else {
          out_ += static_cast<char>(c);
        }
    }
  }
  out_ += '"';
}

}  // namespace headroom
