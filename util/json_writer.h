// A small streaming JSON writer: objects, arrays, strings with escaping, numbers.
#ifndef HEADROOM_UTIL_JSON_WRITER_H_
#define HEADROOM_UTIL_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace headroom {

// Writes compact JSON. Call Key() before each value inside an object; commas are inserted
// for you. Non-finite doubles are written as null. Misuse (a value without a key inside an
// object, unbalanced End calls) is a programming error and aborts. Not thread-safe.
//
//   JsonWriter w;
//   w.BeginObject().Key("arena_bytes").Uint(1024).Key("name").String("mlp").EndObject();
//   w.str();  // {"arena_bytes":1024,"name":"mlp"}
class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(std::string_view key);
  JsonWriter& String(std::string_view value);
  JsonWriter& Uint(uint64_t value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  // Returns the JSON written so far.
  const std::string& str() const { return out_; }

 private:
  enum class Scope { kObject, kArray };
  void BeforeValue();
  // Begin/End of an object or array: writes `bracket` and enters or leaves `scope`.
  JsonWriter& Open(Scope scope, char bracket);
  JsonWriter& Close(Scope scope, char bracket);
  void AppendEscaped(std::string_view s);

  std::string out_;
  std::vector<Scope> scopes_;
  // Whether the current scope already holds an element (so the next needs a comma).
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

}  // namespace headroom

#endif  // HEADROOM_UTIL_JSON_WRITER_H_
