#include "dump.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

#include "npy.hpp"
#include "switchyard/version.hpp"

namespace switchyard::bench {
namespace {

namespace fs = std::filesystem;

void create_directories(const fs::path& path, const std::string& flag) {
  std::error_code error;
  fs::create_directories(path, error);
  if (error || !fs::is_directory(path)) {
    std::string why = error ? error.message() : "not a directory";
    throw UsageError(flag + ": expected a directory that can be created, got '" + path.string() + "' (" +
                     why + ")");
  }
}

}  // namespace

DumpDirectory::DumpDirectory(std::string root) : root_(std::move(root)) {
  create_directories(root_, "--dump");
}

void DumpDirectory::write(const std::string& group, int rank, const std::string& name,
                          const TensorView& host) {
  if (!host.defined()) return;
  fs::path relative = fs::path(group) / ("rank" + std::to_string(rank)) / (name + ".npy");
  fs::path path = fs::path(root_) / relative;
  create_directories(path.parent_path(), "--dump");
  write_npy(path.string(), host);
  File file{relative.generic_string(), host.dtype,
            std::vector<int64_t>(host.shape.begin(), host.shape.begin() + host.ndim)};
  std::lock_guard<std::mutex> lock(mutex_);
  files_.push_back(std::move(file));
}

void DumpDirectory::write(const std::string& group, int rank, const std::string& name,
                          const std::vector<int>& values) {
  std::vector<int> copy = values;  // TensorView wants a mutable pointer
  write(group, rank, name, TensorView(copy.data(), DType::i32, {static_cast<int64_t>(copy.size())}));
}

void DumpDirectory::write_meta(const BenchOptions& options, const std::vector<std::string>& engines) const {
  std::vector<File> files;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    files = files_;
  }
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.path < b.path; });

  nlohmann::ordered_json meta;
  meta["format"] = "switchyard-bench dump";
  meta["switchyard_version"] = SWITCHYARD_VERSION_STRING;
  meta["layout"] =
      "<group>/rank<r>/<name>.npy; a group is an engine, or 'reference' for the expected outputs";
  meta["backend"] = backend_name(options.backend);
  meta["ranks"] = options.topology.num_ranks;
  meta["ranks_per_node"] = options.topology.ranks_per_node;
  meta["tokens"] = options.tokens_per_rank;
  meta["hidden"] = options.hidden;
  meta["topk"] = options.topk;
  meta["experts"] = options.num_experts;
  meta["dtype"] = numpy_dtype_name(options.dtype);
  meta["seed"] = options.seed;
  meta["engines"] = engines;
  nlohmann::ordered_json stored_as = nlohmann::ordered_json::object();
  for (DType dtype : {DType::bf16, DType::fp8_e4m3, DType::f32, DType::i32, DType::i64, DType::boolean})
    stored_as[numpy_dtype_name(dtype)] = npy_descr(dtype);
  meta["stored_as"] = stored_as;
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const File& file : files) {
    entries.push_back({{"path", file.path},
                       {"dtype", numpy_dtype_name(file.dtype)},
                       {"stored_as", npy_descr(file.dtype)},
                       {"shape", file.shape}});
  }
  meta["files"] = entries;

  const std::string path = (fs::path(root_) / "meta.json").string();
  std::ofstream out(path);
  out << meta.dump(2) << "\n";
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace switchyard::bench
