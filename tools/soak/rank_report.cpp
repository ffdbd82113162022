#include "rank_report.hpp"

#include <sstream>

namespace switchyard::soak {

void RankReport::add_round(int round, const std::vector<std::string>& lines) {
  for (const std::string& line : lines) mismatches.push_back("round " + std::to_string(round) + ": " + line);
}

std::string RankReport::serialize() const {
  std::string text = corrupted ? "corrupted\n" : "intact\n";
  for (const std::string& line : mismatches) {
    std::string one_line = line;
    for (char& character : one_line) {
      if (character == '\n') character = ' ';
    }
    text += one_line + "\n";
  }
  return text;
}

RankReport RankReport::deserialize(const std::string& text) {
  RankReport report;
  std::istringstream in(text);
  std::string line;
  if (std::getline(in, line)) report.corrupted = line == "corrupted";
  while (std::getline(in, line)) report.mismatches.push_back(line);
  return report;
}

bool flip_one_bit(const TensorView& host) {
  if (!host.defined() || host.nbytes() == 0) return false;
  *host.as<unsigned char>() ^= 1u;
  return true;
}

}  // namespace switchyard::soak
