// The Buffer class and what every engine shares: options, handles for peers, synchronisation.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "switchyard/config.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::python {

namespace {

Backend parse_backend(const std::string& name) {
  if (name == "cpu") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  throw InvalidArgument("backend: expected 'cpu' or 'cuda', got '" + name + "'");
}

HeapSharing parse_sharing(const std::string& name) {
  if (name == "threads") return HeapSharing::threads;
  if (name == "processes") return HeapSharing::processes;
  throw InvalidArgument("sharing: expected 'threads' or 'processes', got '" + name + "'");
}

TransportKind parse_transport(const std::string& name) {
  if (name == "loopback") return TransportKind::loopback;
  if (name == "nccl_gin") return TransportKind::nccl_gin;
  throw InvalidArgument("transport: expected 'loopback' or 'nccl_gin', got '" + name + "'");
}

// BufferSizing::symmetric_heap_receive_dtype by name ("fp8_e4m3" or "bf16"; the sizing check names the field
// for any other DType, but a name that is no DType at all stops here).
DType receive_dtype(const std::string& name) {
  if (name == "fp8_e4m3") return DType::fp8_e4m3;
  if (name == "bf16") return DType::bf16;
  throw InvalidArgument("symmetric_heap_receive_dtype: expected 'fp8_e4m3' or 'bf16', got '" + name + "'");
}

Bytes to_bytes(nb::handle object, const std::string& name) {
  if (!nb::isinstance<nb::bytes>(object)) {
    throw InvalidArgument(name + ": expected bytes, got " + nb::inst_name(object).c_str());
  }
  nb::bytes bytes = nb::borrow<nb::bytes>(object);
  const auto* data = static_cast<const uint8_t*>(bytes.data());
  return Bytes(data, data + bytes.size());
}

}  // namespace

PyBuffer::PyBuffer(const BufferOptions& options)
    : CallerDevice(options.backend == Backend::cuda),
      Buffer(options),
      placement_{options.backend == Backend::cuda, options.device} {
  restore();
}

// The Buffer's destructor runs after this body and before CallerDevice's, which restores.
PyBuffer::~PyBuffer() {
  save();
}

BufferClass bind_buffer(nb::module_& m) {
  nb::class_<Config>(m, "Config", "Tuning of the normal engine and the bound on every wait (config.hpp).")
      .def(
          "__init__",
          [](Config* self, int num_channels, int ring_slots, int chunk_tokens, double timeout_seconds) {
            new (self) Config();
            self->num_channels = num_channels;
            self->ring_slots = ring_slots;
            self->chunk_tokens = chunk_tokens;
            self->timeout_seconds = timeout_seconds;
          },
          nb::arg("num_channels") = Config::kAutoChannels, nb::arg("ring_slots") = Config::kDefaultRingSlots,
          nb::arg("chunk_tokens") = Config::kDefaultChunkTokens,
          nb::arg("timeout_seconds") = Config::kDefaultTimeoutSeconds)
      .def_rw("num_channels", &Config::num_channels)
      .def_rw("ring_slots", &Config::ring_slots)
      .def_rw("chunk_tokens", &Config::chunk_tokens)
      .def_rw("timeout_seconds", &Config::timeout_seconds)
      .def_rw("mask_ranks_on_timeout", &Config::mask_ranks_on_timeout,
              "The expert-major engines mask a peer whose wait timed out instead of raising (config.hpp).")
      .def_prop_rw(
          "symmetric_combine",
          [](const Config& self) { return std::string(symmetric_combine_name(self.symmetric_combine)); },
          [](Config& self, const std::string& path) {
            if (path == "auto") {
              self.symmetric_combine = SymmetricCombine::automatic;
            } else if (path == "push") {
              self.symmetric_combine = SymmetricCombine::push;
            } else if (path == "pull") {
              self.symmetric_combine = SymmetricCombine::pull;
            } else {
              throw InvalidArgument("symmetric_combine: expected 'auto', 'push' or 'pull', got '" + path +
                                    "'");
            }
          },
          "The symmetric engine's combine path: 'auto' (pull where every rank is a thread of this process on "
          "one device, else push), 'push' or 'pull' (config.hpp).")
      .def_prop_rw(
          "symmetric_dispatch",
          [](const Config& self) { return std::string(symmetric_dispatch_name(self.symmetric_dispatch)); },
          [](Config& self, const std::string& path) {
            if (path == "auto") {
              self.symmetric_dispatch = SymmetricDispatch::automatic;
            } else if (path == "publish") {
              self.symmetric_dispatch = SymmetricDispatch::publish;
            } else if (path == "zero_copy") {
              self.symmetric_dispatch = SymmetricDispatch::zero_copy;
            } else {
              throw InvalidArgument(
                  "symmetric_dispatch: expected 'auto', 'publish' or 'zero_copy' (auto pushes where it can), "
                  "got '" +
                  path + "'");
            }
          },
          "The symmetric engine's dispatch source: 'auto' (zero_copy where every rank is a thread of this "
          "process on one device, else publish; on CUDA the push there instead), 'publish' or 'zero_copy' "
          "(config.hpp). Buffer.symmetric_dispatch_path() says which ran.")
      .def_ro_static("default_cpu_channels", &Config::kDefaultCpuChannels,
                     "The channels (host threads) the CPU backend runs with num_channels = 0 (auto).")
      .def("validate", &Config::validate)
      .def("__repr__", &Config::to_string);

  nb::class_<CallTuning>(
      m, "CallTuning",
      "One normal call's tuning (DeepEP's per-call Config); 0 keeps the Buffer's (config.hpp).")
      .def(
          "__init__",
          [](CallTuning* self, int num_channels, int ring_slots, int chunk_tokens) {
            new (self) CallTuning{num_channels, ring_slots, chunk_tokens};
          },
          nb::arg("num_channels") = 0, nb::arg("ring_slots") = 0, nb::arg("chunk_tokens") = 0)
      .def_rw("num_channels", &CallTuning::num_channels)
      .def_rw("ring_slots", &CallTuning::ring_slots)
      .def_rw("chunk_tokens", &CallTuning::chunk_tokens)
      .def("__repr__", &CallTuning::to_string);

  nb::class_<BufferSizing>(m, "BufferSizing", "The largest call a buffer serves; sizes the heap.")
      .def(
          "__init__",
          [](BufferSizing* self, int64_t max_tokens_per_rank, int hidden, int topk, int num_experts,
             int64_t low_latency_max_tokens_per_rank, int64_t symmetric_max_tokens_per_rank,
             bool symmetric_heap_input, int64_t symmetric_heap_output_rows_per_expert,
             int64_t symmetric_heap_receive_rows_per_expert, const std::string& symmetric_heap_receive_dtype,
             int64_t normal_heap_input_tokens, int64_t normal_heap_combine_rows) {
            new (self) BufferSizing();
            self->max_tokens_per_rank = max_tokens_per_rank;
            self->hidden = hidden;
            self->topk = topk;
            self->num_experts = num_experts;
            self->low_latency_max_tokens_per_rank = low_latency_max_tokens_per_rank;
            self->symmetric_max_tokens_per_rank = symmetric_max_tokens_per_rank;
            self->symmetric_heap_input = symmetric_heap_input;
            self->symmetric_heap_output_rows_per_expert = symmetric_heap_output_rows_per_expert;
            self->symmetric_heap_receive_rows_per_expert = symmetric_heap_receive_rows_per_expert;
            self->symmetric_heap_receive_dtype = receive_dtype(symmetric_heap_receive_dtype);
            self->normal_heap_input_tokens = normal_heap_input_tokens;
            self->normal_heap_combine_rows = normal_heap_combine_rows;
          },
          nb::arg("max_tokens_per_rank") = 4096, nb::arg("hidden") = 7168, nb::arg("topk") = 8,
          nb::arg("num_experts") = 256, nb::arg("low_latency_max_tokens_per_rank") = 0,
          nb::arg("symmetric_max_tokens_per_rank") = 0, nb::arg("symmetric_heap_input") = false,
          nb::arg("symmetric_heap_output_rows_per_expert") = 0,
          nb::arg("symmetric_heap_receive_rows_per_expert") = 0,
          nb::arg("symmetric_heap_receive_dtype") = "fp8_e4m3", nb::arg("normal_heap_input_tokens") = 0,
          nb::arg("normal_heap_combine_rows") = 0)
      .def_rw("max_tokens_per_rank", &BufferSizing::max_tokens_per_rank)
      .def_rw("hidden", &BufferSizing::hidden)
      .def_rw("topk", &BufferSizing::topk)
      .def_rw("num_experts", &BufferSizing::num_experts)
      .def_rw("low_latency_max_tokens_per_rank", &BufferSizing::low_latency_max_tokens_per_rank)
      .def_rw("symmetric_max_tokens_per_rank", &BufferSizing::symmetric_max_tokens_per_rank)
      .def_rw("symmetric_heap_input", &BufferSizing::symmetric_heap_input)
      .def_rw("symmetric_heap_output_rows_per_expert", &BufferSizing::symmetric_heap_output_rows_per_expert)
      .def_rw("symmetric_heap_receive_rows_per_expert", &BufferSizing::symmetric_heap_receive_rows_per_expert)
      .def_prop_rw(
          "symmetric_heap_receive_dtype",
          [](const BufferSizing& sizing) {
            return std::string(dtype_name(sizing.symmetric_heap_receive_dtype));
          },
          [](BufferSizing& sizing, const std::string& name) {
            sizing.symmetric_heap_receive_dtype = receive_dtype(name);
          })
      .def_rw("normal_heap_input_tokens", &BufferSizing::normal_heap_input_tokens)
      .def_rw("normal_heap_combine_rows", &BufferSizing::normal_heap_combine_rows);

  m.def("cuda_available", &cuda_available,
        "True when this build has the CUDA backend and a device is visible.");
  m.def(
      "normal_heap_bytes",
      [](int num_ranks, int ranks_per_node, const Config& config, const BufferSizing& sizing) {
        return normal_heap_bytes(Topology{num_ranks, ranks_per_node}, config, sizing);
      },
      nb::arg("num_ranks"), nb::arg("ranks_per_node"), nb::arg("config"), nb::arg("sizing"));
  m.def(
      "normal_rdma_heap_bytes",
      [](int num_ranks, int ranks_per_node, const Config& config, const BufferSizing& sizing) {
        return normal_rdma_heap_bytes(Topology{num_ranks, ranks_per_node}, config, sizing);
      },
      nb::arg("num_ranks"), nb::arg("ranks_per_node"), nb::arg("config"), nb::arg("sizing"),
      "Of normal_heap_bytes, the hierarchical engine's RDMA region (0 within one node).");

  nb::class_<DispatchHandle>(
      m, "DispatchHandle",
      "Opaque: the routing of one dispatch, for combine and cached dispatch. Valid only "
      "with the Buffer that made it.")
      .def_prop_ro("num_recv_tokens", &DispatchHandle::num_recv_tokens)
      .def_prop_ro("num_tokens", &DispatchHandle::num_tokens)
      .def_prop_ro("num_channels", &DispatchHandle::num_channels)
      .def(
          "routing",
          [](const DispatchHandle& handle, const std::string& framework) {
            const OutputStyle style = parse_output_style(framework);
            return nb::make_tuple(to_python(handle.is_token_in_rank(), style),
                                  to_python(handle.recv_src_token(), style),
                                  to_python(handle.recv_channel_start(), style));
          },
          nb::arg("framework") = "numpy",
          "-> (is_token_in_rank bool [N, R], recv_src_token i32 [M], recv_channel_start i32 [R * C + 1]): "
          "the handle's own memory (combine and cached dispatch read it: do not write), on the backend's "
          "device (buffer.hpp)")
      .def("__repr__", [](const DispatchHandle& handle) {
        return "<switchyard.DispatchHandle num_tokens=" + std::to_string(handle.num_tokens()) +
               " num_recv_tokens=" + std::to_string(handle.num_recv_tokens()) + ">";
      });

  BufferClass buffer(m, "Buffer",
                     "One rank's buffer (buffer.hpp). Use switchyard.Buffer, which connects it.");
  buffer
      .def(
          "__init__",
          [](PyBuffer* self, int num_ranks, int ranks_per_node, int rank, const std::string& backend,
             int device, const std::string& sharing, const Config& config, const BufferSizing& sizing,
             size_t heap_bytes, const std::string& transport, std::optional<uint32_t> loopback_max_delay_us,
             std::optional<uint64_t> loopback_seed, uintptr_t nccl_comm) {
            BufferOptions options;
            options.transport.kind = parse_transport(transport);
            options.transport.loopback_max_delay_us = loopback_max_delay_us;
            options.transport.loopback_seed = loopback_seed;
            options.transport.nccl_comm = reinterpret_cast<void*>(nccl_comm);
            options.topology = Topology{num_ranks, ranks_per_node};
            options.rank = rank;
            options.backend = parse_backend(backend);
            options.device = device;
            options.sharing = parse_sharing(sharing);
            options.config = config;
            options.sizing = sizing;
            options.heap_bytes = heap_bytes;
            new (self) PyBuffer(options);
          },
          nb::arg("num_ranks"), nb::arg("ranks_per_node"), nb::arg("rank"), nb::arg("backend"),
          nb::arg("device"), nb::arg("sharing"), nb::arg("config"), nb::arg("sizing"), nb::arg("heap_bytes"),
          nb::arg("transport") = "loopback", nb::arg("loopback_max_delay_us").none() = nb::none(),
          nb::arg("loopback_seed").none() = nb::none(), nb::arg("nccl_comm") = 0)
      .def("local_handle",
           [](const PyBuffer& self) {
             Bytes handle = self.local_handle();
             return nb::bytes(reinterpret_cast<const char*>(handle.data()), handle.size());
           })
      .def(
          "connect",
          [](PyBuffer& self, nb::handle all_handles) {
            CallScope scope(self);
            std::vector<Bytes> handles;
            size_t index = 0;
            for (nb::handle item : all_handles) {
              handles.push_back(to_bytes(item, "all_handles[" + std::to_string(index++) + "]"));
            }
            nb::gil_scoped_release release;
            self.connect(handles);
          },
          nb::arg("all_handles"))
      .def_prop_ro("is_connected", &Buffer::is_connected)
      .def_prop_ro("num_channels", &Buffer::num_channels,
                   "The normal engine's channels by default (buffer.hpp).")
      .def_prop_ro("max_num_channels", &Buffer::max_num_channels,
                   "The most channels a call's CallTuning may ask for (known once connected on CUDA).")
      .def_rw("last_stream", &PyBuffer::last_stream,
              "The stream of the last call (the package's or switchyard._torch_ops's): synchronize()'s "
              "default.")
      .def(
          "synchronize",
          [](PyBuffer& self, uintptr_t stream) {
            CallScope scope(self);
            nb::gil_scoped_release release;
            self.synchronize(reinterpret_cast<Stream>(stream));
          },
          nb::arg("stream") = 0)
      .def(
          "update_mask",
          [](PyBuffer& self, int rank, bool masked, uintptr_t stream) {
            CallScope scope(self);
            nb::gil_scoped_release release;
            self.update_mask(rank, masked, reinterpret_cast<Stream>(stream));
          },
          nb::arg("rank"), nb::arg("masked"), nb::arg("stream") = 0,
          "Masks (or unmasks) `rank` in this rank's view (Buffer::update_mask, buffer.hpp).")
      .def(
          "query_mask",
          [](PyBuffer& self, uintptr_t stream, const std::string& framework) {
            CallScope scope(self);
            Tensor mask;
            {
              nb::gil_scoped_release release;
              mask = self.query_mask(reinterpret_cast<Stream>(stream));
            }
            return to_python(mask, parse_output_style(framework));
          },
          nb::arg("stream") = 0, nb::arg("framework") = "numpy",
          "-> i32 [R], 1 where a rank is masked, on the buffer's device, ready on `stream`.")
      .def(
          "clean_mask",
          [](PyBuffer& self, uintptr_t stream) {
            CallScope scope(self);
            nb::gil_scoped_release release;
            self.clean_mask(reinterpret_cast<Stream>(stream));
          },
          nb::arg("stream") = 0, "Unmasks every rank (Buffer::clean_mask).")
      .def_prop_ro("rank", &Buffer::rank)
      .def_prop_ro("num_ranks", [](const PyBuffer& self) { return self.topology().num_ranks; })
      .def_prop_ro("ranks_per_node", [](const PyBuffer& self) { return self.topology().ranks_per_node; })
      .def_prop_ro("backend", [](const PyBuffer& self) { return std::string(backend_name(self.backend())); })
      .def_prop_ro(
          "device", [](const PyBuffer& self) { return self.placement().device; },
          "The CUDA device of a CUDA Buffer's tensors (CPU Buffers: as given, unused).")
      .def_prop_ro("config", [](const PyBuffer& self) { return self.config(); })
      .def_prop_ro("heap_bytes", &Buffer::heap_bytes)
      .def_prop_ro(
          "symmetric_combine_path",
          [](const PyBuffer& self) {
            return std::string(symmetric_combine_name(self.symmetric_combine_path()));
          },
          "The path symmetric_combine takes on this connected buffer: 'push' or 'pull'.")
      .def_prop_ro(
          "symmetric_dispatch_path",
          [](const PyBuffer& self) {
            return std::string(symmetric_dispatch_name(self.symmetric_dispatch_path()));
          },
          "Where symmetric_dispatch pulls bf16 rows from on this connected buffer: 'publish' or "
          "'zero_copy'.");
  return buffer;
}

}  // namespace switchyard::python
