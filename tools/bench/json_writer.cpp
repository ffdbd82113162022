#include "json_writer.hpp"

#include <cmath>
#include <cstdio>

namespace switchyard::bench {

std::string json_quote(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        quoted += "\\\"";
        break;
      case '\\':
        quoted += "\\\\";
        break;
      case '\b':
        quoted += "\\b";
        break;
      case '\f':
        quoted += "\\f";
        break;
      case '\n':
        quoted += "\\n";
        break;
      case '\r':
        quoted += "\\r";
        break;
      case '\t':
        quoted += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x",
                        static_cast<unsigned>(static_cast<unsigned char>(c)));
          quoted += escaped;
        } else {
          quoted += c;  // UTF-8 passes through unchanged
        }
    }
  }
  return quoted + "\"";
}

void JsonWriter::newline() {
  out_ << '\n' << std::string(2 * has_items_.size(), ' ');
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_items_.empty()) {
    if (has_items_.back()) out_ << ',';
    has_items_.back() = true;
    newline();
  }
}

void JsonWriter::begin_object() {
  before_value();
  out_ << '{';
  has_items_.push_back(false);
}

void JsonWriter::end_object() {
  bool had_items = has_items_.back();
  has_items_.pop_back();
  if (had_items) newline();
  out_ << '}';
  if (has_items_.empty()) out_ << '\n';
}

void JsonWriter::begin_array() {
  before_value();
  out_ << '[';
  has_items_.push_back(false);
}

void JsonWriter::end_array() {
  bool had_items = has_items_.back();
  has_items_.pop_back();
  if (had_items) newline();
  out_ << ']';
  if (has_items_.empty()) out_ << '\n';
}

void JsonWriter::key(const std::string& name) {
  before_value();
  out_ << json_quote(name) << ": ";
  after_key_ = true;
}

void JsonWriter::string(const std::string& value) {
  before_value();
  out_ << json_quote(value);
}

void JsonWriter::integer(int64_t value) {
  before_value();
  out_ << value;
}

void JsonWriter::unsigned_integer(uint64_t value) {
  before_value();
  out_ << value;
}

void JsonWriter::number(double value) {
  before_value();
  if (!std::isfinite(value)) {
    out_ << "null";
    return;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.10g", value);
  out_ << text;
}

void JsonWriter::boolean(bool value) {
  before_value();
  out_ << (value ? "true" : "false");
}

void JsonWriter::null() {
  before_value();
  out_ << "null";
}

void JsonWriter::number_or_null(const std::optional<double>& value) {
  if (value) {
    number(*value);
  } else {
    null();
  }
}

void JsonWriter::integer_or_null(const std::optional<int64_t>& value) {
  if (value) {
    integer(*value);
  } else {
    null();
  }
}

}  // namespace switchyard::bench
