#pragma once
// --dump DIR: every input and output of the check iteration as .npy files,
// DIR/<engine>/rank<r>/<name>.npy (the reference's outputs under DIR/reference/), and DIR/meta.json
// naming the shape, the seed and each file's real dtype.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "options.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::bench {

class DumpDirectory {
 public:
  // Creates `root`; throws UsageError naming --dump when it cannot.
  explicit DumpDirectory(std::string root);

  // Writes <root>/<group>/rank<rank>/<name>.npy from a host tensor. Safe to call from every rank.
  void write(const std::string& group, int rank, const std::string& name, const TensorView& host);
  // A std::vector<int> output (e.g. num_recv_tokens_per_expert) as i32 [n].
  void write(const std::string& group, int rank, const std::string& name, const std::vector<int>& values);

  // <root>/meta.json: the options, the groups written, and every file with its dtype and shape.
  void write_meta(const BenchOptions& options, const std::vector<std::string>& engines) const;

  const std::string& root() const { return root_; }

 private:
  struct File {
    std::string path;  // relative to root
    DType dtype;
    std::vector<int64_t> shape;
  };
  std::string root_;
  mutable std::mutex mutex_;
  std::vector<File> files_;
};

}  // namespace switchyard::bench
