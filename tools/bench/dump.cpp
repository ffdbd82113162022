#include "dump.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include "json_writer.hpp"
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

  std::string path = (fs::path(root_) / "meta.json").string();
  std::ofstream out(path);
  JsonWriter json(out);
  json.begin_object();
  json.key("format");
  json.string("switchyard-bench dump");
  json.key("switchyard_version");
  json.string(SWITCHYARD_VERSION_STRING);
  json.key("layout");
  json.string("<group>/rank<r>/<name>.npy; a group is an engine, or 'reference' for the expected outputs");
  json.key("backend");
  json.string(backend_name(options.backend));
  json.key("ranks");
  json.integer(options.topology.num_ranks);
  json.key("ranks_per_node");
  json.integer(options.topology.ranks_per_node);
  json.key("tokens");
  json.integer(options.tokens_per_rank);
  json.key("hidden");
  json.integer(options.hidden);
  json.key("topk");
  json.integer(options.topk);
  json.key("experts");
  json.integer(options.num_experts);
  json.key("dtype");
  json.string(numpy_dtype_name(options.dtype));
  json.key("seed");
  json.unsigned_integer(options.seed);
  json.key("engines");
  json.begin_array();
  for (const std::string& engine : engines) json.string(engine);
  json.end_array();
  json.key("stored_as");
  json.begin_object();
  for (DType dtype : {DType::bf16, DType::fp8_e4m3, DType::f32, DType::i32, DType::i64, DType::boolean}) {
    json.key(numpy_dtype_name(dtype));
    json.string(npy_descr(dtype));
  }
  json.end_object();
  json.key("files");
  json.begin_array();
  for (const File& file : files) {
    json.begin_object();
    json.key("path");
    json.string(file.path);
    json.key("dtype");
    json.string(numpy_dtype_name(file.dtype));
    json.key("stored_as");
    json.string(npy_descr(file.dtype));
    json.key("shape");
    json.begin_array();
    for (int64_t size : file.shape) json.integer(size);
    json.end_array();
    json.end_object();
  }
  json.end_array();
  json.end_object();
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace switchyard::bench
