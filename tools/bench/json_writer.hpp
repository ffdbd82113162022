#pragma once
// A small streaming JSON writer (no dependency): objects, arrays, escaped strings, numbers, null.
// Commas and indentation are handled here; the caller only nests begin/end calls correctly.
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace switchyard::bench {

// `text` as a JSON string literal, quotes included; control characters as \uXXXX.
std::string json_quote(const std::string& text);

class JsonWriter {
 public:
  explicit JsonWriter(std::ostream& out) : out_(out) {}

  void begin_object();
  void end_object();
  void begin_array();
  void end_array();
  // Inside an object: the key of the next value.
  void key(const std::string& name);

  void string(const std::string& value);
  void integer(int64_t value);
  void unsigned_integer(uint64_t value);
  // Finite numbers with up to 10 significant digits; NaN and infinities become null.
  void number(double value);
  void boolean(bool value);
  void null();
  // A number, or null when absent.
  void number_or_null(const std::optional<double>& value);
  void integer_or_null(const std::optional<int64_t>& value);

 private:
  void before_value();
  void newline();

  std::ostream& out_;
  std::vector<bool> has_items_;  // per open container
  bool after_key_ = false;
};

}  // namespace switchyard::bench
