#include "cuda/file_rendezvous.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <numeric>
#include <thread>

#include "switchyard/errors.hpp"

namespace switchyard::testing {

std::string rank_file(const std::string& dir, const std::string& name, int rank) {
  return dir + "/" + name + "." + std::to_string(rank);
}

void write_rank_file(const std::string& path, const Bytes& bytes) {
  const std::string temporary = path + ".tmp";
  std::ofstream(temporary, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::rename(temporary.c_str(), path.c_str());
}

std::vector<Bytes> gather_rank_files(const std::string& dir, const std::string& name,
                                     const std::vector<int>& ranks, double seconds) {
  std::vector<Bytes> all;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int rank : ranks) {
    for (;;) {
      std::ifstream in(rank_file(dir, name, rank), std::ios::binary);
      if (in) {
        all.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        throw TimeoutError("process rendezvous: rank " + std::to_string(rank) + " never wrote " + name);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return all;
}

std::vector<Bytes> gather_rank_files(const std::string& dir, const std::string& name, int num_ranks,
                                     double seconds) {
  std::vector<int> ranks(num_ranks);
  std::iota(ranks.begin(), ranks.end(), 0);
  return gather_rank_files(dir, name, ranks, seconds);
}

}  // namespace switchyard::testing
