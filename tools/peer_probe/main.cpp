// switchyard-peer-probe: R ranks on the visible GPUs (rank r on GPU r mod count), as threads of one
// process or as forked processes (under MPS when they share a GPU), each copying rows between its own
// memory and its peers' buffers mapped in its address space (the same pointer as threads; an IPC
// mapping as processes), as the symmetric engine's pull (read) and push (write) do. Every rank copies
// at once (a host barrier before each launch); the figure is the slowest rank's kernel time, median
// over the iterations. It measures the mapping, not the engine: the engine's 4096-token pull ran 3.9x
// slower as processes than as threads on one GPU (bench/NOTES.md, session 10), and this says whether
// plain copies through IPC mappings do the same, and how that depends on the span of the rows read
// (address translation) and on whose memory is read.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "json_ranks.hpp"
#include "row_copy.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"

namespace switchyard::peer_probe {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

void check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess)
    throw SystemError("switchyard-peer-probe: " + what + " failed: " + cudaGetErrorName(status) + " (" +
                      cudaGetErrorString(status) + ")");
}

struct Options {
  int ranks = 8;
  std::string ranks_as = "threads";
  int64_t rows = 32768;       // per rank: a 4096-token DeepSeek-V3 dispatch's rows (top-8)
  uint32_t row_bytes = 7168;  // an fp8 row of hidden 7168
  std::vector<int64_t> spans_mib{2, 64, 512, 2048};
  std::vector<std::string> directions{"read", "write"};
  std::vector<std::string> owners{"peers", "self"};
  std::vector<std::string> orders{"random", "sequential"};
  int blocks = 0;  // per rank; 0: the SMs of its GPU over the ranks that share it
  int threads = 512;
  int shared_kib = 0;  // dynamic shared memory per block (unused): the engine's occupancy, one block per SM
  std::string own_memory = "malloc";  // malloc, or pool: this rank's rows from the stream-ordered pool
  // > 0: this rank's rows sit at distinct random rows of an own region of this many MiB (as the
  // dispatch's recv_x rows sit at their experts' places within the capacity), not one after another.
  int64_t own_span_mib = 0;
  bool owner_writes = false;
  // table: every row's source address from a table this rank uploads; peer-written: from a route record
  // (owner, row) that the previous rank writes into this rank's shared buffer before every copy, through
  // its mapping, as the engine's sources route their tokens into the receivers' heaps.
  std::string routes = "table";
  // Bytes added to every shared buffer's allocation (KiB): whether the allocation's size, not the rows
  // read, changes what its mappings cost (a size off the large-page multiples).
  int64_t shared_extra_kib = 0;  // each owner rewrites its shared span before every copy (as a publish does)
  int iters = 10;
  int warmup = 2;
  uint64_t seed = 17;
};

// One configuration: whose buffer the rows are in, where in it, and which way they go.
struct Case {
  int64_t span_mib;
  std::string direction;  // read: from the owners' buffers into this rank's rows; write: the reverse
  std::string
      owner;  // peers: row i is in rank (rank + i) mod R's buffer (this rank's own 1/R); self: all here
  std::string order;  // random: each row at a random row of the span; sequential: rows in order
};

// Per rank: its shared buffer (what peers map), its private rows, and the address tables.
struct RankMemory {
  uint8_t* shared = nullptr;
  uint8_t* own_rows = nullptr;
  const uint8_t** from = nullptr;
  uint8_t** to = nullptr;
  std::vector<uint8_t*> mapped;  // every rank's shared buffer in this address space
  std::vector<bool> opened;      // mapped[r] is an IPC mapping to close
};

nlohmann::json run_rank(const Options& o, Group& group) {
  const int rank = group.rank();
  int devices = 0;
  check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  const int device = rank % devices;
  check(cudaSetDevice(device), "cudaSetDevice");
  const bool processes = o.ranks_as == "processes";
  const int sharing = (o.ranks + devices - 1 - device) / devices;  // ranks on this GPU
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  const int blocks = o.blocks > 0 ? o.blocks : std::max(1, sms / sharing);
  const int shared_bytes = o.shared_kib * 1024;
  check(set_row_copy_shared_bytes(shared_bytes), "the row copy's shared memory (--shared-kib)");

  const int64_t max_span_mib = *std::max_element(o.spans_mib.begin(), o.spans_mib.end());
  const size_t span_bytes = static_cast<size_t>(max_span_mib) * kMiB;
  const size_t own_bytes =
      std::max(static_cast<size_t>(o.rows) * o.row_bytes, static_cast<size_t>(o.own_span_mib) * kMiB);
  // Where each of this rank's rows sits in its own region: in order, or at distinct random rows.
  std::vector<int64_t> own_slot(static_cast<size_t>(o.rows));
  for (int64_t i = 0; i < o.rows; ++i) own_slot[i] = i;
  if (o.own_span_mib > 0) {
    std::vector<int64_t> slots(own_bytes / o.row_bytes);
    for (size_t k = 0; k < slots.size(); ++k) slots[k] = static_cast<int64_t>(k);
    std::mt19937_64 shuffle(o.seed + 7919u * static_cast<uint64_t>(rank));
    std::shuffle(slots.begin(), slots.end(), shuffle);
    for (int64_t i = 0; i < o.rows; ++i) own_slot[i] = slots[static_cast<size_t>(i)];
  }
  RankMemory m;
  // The route records' area follows the span (peer-written routes only).
  const size_t route_bytes = o.routes == "peer-written" ? static_cast<size_t>(o.rows) * sizeof(int2) : 0;
  check(cudaMalloc(&m.shared, span_bytes + route_bytes + static_cast<size_t>(o.shared_extra_kib) * 1024),
        "cudaMalloc(shared buffer)");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  // The engines' outputs (recv_x) come from the stream-ordered pool; cudaMalloc is the control.
  if (o.own_memory == "pool") {
    check(cudaMallocAsync(&m.own_rows, own_bytes, stream), "cudaMallocAsync(own rows)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  } else {
    check(cudaMalloc(&m.own_rows, own_bytes), "cudaMalloc(own rows)");
  }
  check(cudaMemset(m.shared, rank + 1, span_bytes), "cudaMemset");
  check(cudaMemset(m.own_rows, 0, own_bytes), "cudaMemset");
  check(cudaMalloc(&m.from, o.rows * sizeof(void*)), "cudaMalloc(from table)");
  check(cudaMalloc(&m.to, o.rows * sizeof(void*)), "cudaMalloc(to table)");

  // Every rank's shared buffer, mapped here.
  Bytes mine(processes ? sizeof(cudaIpcMemHandle_t) : sizeof(void*));
  if (processes) {
    cudaIpcMemHandle_t handle{};
    check(cudaIpcGetMemHandle(&handle, m.shared), "cudaIpcGetMemHandle");
    std::memcpy(mine.data(), &handle, sizeof(handle));
  } else {
    std::memcpy(mine.data(), &m.shared, sizeof(void*));
  }
  const std::vector<Bytes> all = group.allgather(mine);
  m.mapped.assign(static_cast<size_t>(o.ranks), nullptr);
  m.opened.assign(static_cast<size_t>(o.ranks), false);
  for (int r = 0; r < o.ranks; ++r) {
    if (r == rank) {
      m.mapped[r] = m.shared;
    } else if (processes) {
      cudaIpcMemHandle_t handle{};
      std::memcpy(&handle, all[r].data(), sizeof(handle));
      void* pointer = nullptr;
      check(cudaIpcOpenMemHandle(&pointer, handle, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
      m.mapped[r] = static_cast<uint8_t*>(pointer);
      m.opened[r] = true;
    } else {
      std::memcpy(&m.mapped[r], all[r].data(), sizeof(void*));
      const int peer_device = r % devices;
      if (peer_device != device) {
        const cudaError_t enabled = cudaDeviceEnablePeerAccess(peer_device, 0);
        if (enabled == cudaErrorPeerAccessAlreadyEnabled) {
          cudaGetLastError();
        } else {
          check(enabled, "cudaDeviceEnablePeerAccess");
        }
      }
    }
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");

  nlohmann::json cases = nlohmann::json::array();
  std::vector<const uint8_t*> from(static_cast<size_t>(o.rows));
  std::vector<uint8_t*> to(static_cast<size_t>(o.rows));
  for (const int64_t span_mib : o.spans_mib) {
    for (const std::string& direction : o.directions) {
      for (const std::string& owner : o.owners) {
        for (const std::string& order : o.orders) {
          const Case c{span_mib, direction, owner, order};
          const int64_t span_rows = static_cast<int64_t>(span_mib * kMiB / o.row_bytes);
          if (span_rows < 1) throw Error("--span-mib " + std::to_string(span_mib) + " holds no row");
          // Reader q's rows: (owner, row in the owner's span), drawn with q's seed, so that any rank can
          // make them (the peer-written routes are written by q's previous rank).
          const auto routes_of = [&](int q) {
            std::vector<int2> routes(static_cast<size_t>(o.rows));
            std::mt19937_64 random(o.seed * 1000003u + static_cast<uint64_t>(q));
            std::uniform_int_distribution<int64_t> pick(0, span_rows - 1);
            for (int64_t i = 0; i < o.rows; ++i) {
              const int owner_rank = c.owner == "self" ? q : static_cast<int>((q + i) % o.ranks);
              // Sequential: q's rows in order from its own place in the span (rank q starts at q x rows),
              // so that no two ranks read the same rows.
              const int64_t at = c.order == "random" ? pick(random) : (q * o.rows + i) % span_rows;
              routes[static_cast<size_t>(i)] = make_int2(owner_rank, static_cast<int>(at));
            }
            return routes;
          };
          const std::vector<int2> mine = routes_of(rank);
          const int routed_reader = (rank + 1) % o.ranks;  // whose routes this rank writes
          const std::vector<int2> routes_written = routes_of(routed_reader);
          for (int64_t i = 0; i < o.rows; ++i) {
            const int owner_rank = mine[static_cast<size_t>(i)].x;
            const int64_t at = mine[static_cast<size_t>(i)].y;
            uint8_t* in_buffer = m.mapped[owner_rank] + at * o.row_bytes;
            uint8_t* own = m.own_rows + own_slot[i] * o.row_bytes;
            from[i] = c.direction == "read" ? in_buffer : own;
            to[i] = c.direction == "read" ? own : in_buffer;
          }
          check(cudaMemcpy(m.from, from.data(), o.rows * sizeof(void*), cudaMemcpyHostToDevice),
                "table upload");
          check(cudaMemcpy(m.to, to.data(), o.rows * sizeof(void*), cudaMemcpyHostToDevice), "table upload");
          const bool routed = o.routes == "peer-written";
          RowCopyJob job{routed ? nullptr : m.from,
                         m.to,
                         o.rows,
                         o.row_bytes,
                         reinterpret_cast<const int2*>(m.shared + span_bytes),
                         {}};
          for (int r = 0; r < o.ranks; ++r) job.owners[r] = m.mapped[r];
          std::vector<double> times;
          for (int iter = 0; iter < o.warmup + o.iters; ++iter) {
            if (o.owner_writes) {
              // As the engine's sources publish their rows just before the peers pull them: the span is
              // freshly written (dirty in L2 where it fits) by its owner's process.
              check(cudaMemsetAsync(m.shared, (rank + iter) & 0xff, static_cast<size_t>(span_mib) * kMiB,
                                    stream),
                    "cudaMemsetAsync(shared span)");
              check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            }
            if (routed) {
              // The next rank's route records, into its shared buffer through this rank's mapping.
              check(cudaMemcpyAsync(m.mapped[routed_reader] + span_bytes, routes_written.data(), route_bytes,
                                    cudaMemcpyHostToDevice, stream),
                    "the route records' upload into a peer");
              check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            }
            group.barrier();
            check(cudaEventRecord(start, stream), "cudaEventRecord");
            check(launch_row_copy(job, blocks, o.threads, shared_bytes, stream), "the row copy's launch");
            check(cudaEventRecord(stop, stream), "cudaEventRecord");
            check(cudaEventSynchronize(stop), "the row copy");
            float ms = 0.0f;
            check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
            if (iter >= o.warmup) times.push_back(1000.0 * ms);
          }
          cases.push_back({{"span_mib", span_mib},
                           {"direction", direction},
                           {"owner", owner},
                           {"order", order},
                           {"us", times}});
        }
      }
    }
  }
  group.barrier();  // nobody unmaps while a peer still copies
  for (int r = 0; r < o.ranks; ++r) {
    if (m.opened[r]) check(cudaIpcCloseMemHandle(m.mapped[r]), "cudaIpcCloseMemHandle");
  }
  group.barrier();
  cudaFree(m.shared);
  if (o.own_memory == "pool") {
    check(cudaFreeAsync(m.own_rows, stream), "cudaFreeAsync");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  } else {
    cudaFree(m.own_rows);
  }
  cudaFree(m.from);
  cudaFree(m.to);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  return {{"rank", rank}, {"device", device}, {"blocks", blocks}, {"cases", cases}};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

int run(const Options& o, const std::string& json_path) {
  const std::vector<nlohmann::json> ranks = bench::run_json_ranks(
      o.ranks, o.ranks_as == "processes", 600.0, [&](Group& group) { return run_rank(o, group).dump(); });
  std::printf(
      "switchyard-peer-probe: %d ranks as %s, %lld rows of %u bytes per rank, %d blocks of %d threads, "
      "%d KiB of shared memory each, own rows from %s (own span %lld MiB: 0 = in order), %s routes%s\n",
      o.ranks, o.ranks_as.c_str(), static_cast<long long>(o.rows), o.row_bytes,
      ranks.front()["blocks"].get<int>(), o.threads, o.shared_kib,
      o.own_memory == "pool" ? "the stream-ordered pool" : "cudaMalloc",
      static_cast<long long>(o.own_span_mib), o.routes.c_str(),
      o.owner_writes ? ", spans rewritten by their owners before every copy" : "");
  std::printf("%-9s %-6s %-5s %-10s %10s %10s %12s\n", "span_mib", "dir", "owner", "order", "slowest_us",
              "median_us", "GB/s_moved");
  nlohmann::json report = {{"ranks", o.ranks},
                           {"ranks_as", o.ranks_as},
                           {"rows", o.rows},
                           {"row_bytes", o.row_bytes},
                           {"shared_kib", o.shared_kib},
                           {"own_memory", o.own_memory},
                           {"cases", nlohmann::json::array()}};
  const size_t count = ranks.front()["cases"].size();
  for (size_t c = 0; c < count; ++c) {
    // Per iteration, the slowest rank; then the median over iterations. And every rank's median.
    const size_t iterations = ranks.front()["cases"][c]["us"].size();
    std::vector<double> slowest(iterations, 0.0), per_rank;
    for (const nlohmann::json& r : ranks) {
      const std::vector<double> us = r["cases"][c]["us"].get<std::vector<double>>();
      for (size_t i = 0; i < iterations; ++i) slowest[i] = std::max(slowest[i], us[i]);
      per_rank.push_back(median(us));
    }
    const double slowest_us = median(slowest);
    // Bytes moved by all ranks (each row read once and written once), over the slowest rank's time.
    const double moved = static_cast<double>(o.ranks) * static_cast<double>(o.rows) * o.row_bytes;
    const double gbps = moved / (slowest_us * 1e-6) / 1e9;
    const nlohmann::json& first = ranks.front()["cases"][c];
    std::printf("%-9lld %-6s %-5s %-10s %10.1f %10.1f %12.1f\n",
                static_cast<long long>(first["span_mib"].get<int64_t>()),
                first["direction"].get<std::string>().c_str(), first["owner"].get<std::string>().c_str(),
                first["order"].get<std::string>().c_str(), slowest_us, median(per_rank), gbps);
    report["cases"].push_back({{"span_mib", first["span_mib"]},
                               {"direction", first["direction"]},
                               {"owner", first["owner"]},
                               {"order", first["order"]},
                               {"slowest_us", slowest_us},
                               {"rank_median_us", per_rank},
                               {"gbps_moved", gbps}});
  }
  if (!json_path.empty()) {
    FILE* file = std::fopen(json_path.c_str(), "w");
    if (file == nullptr) throw Error("--json: cannot write " + json_path);
    std::fputs(report.dump(2).c_str(), file);
    std::fclose(file);
  }
  return 0;
}

}  // namespace
}  // namespace switchyard::peer_probe

int main(int argc, char** argv) {
  using namespace switchyard::peer_probe;
  Options o;
  std::string json_path;
  CLI::App app{
      "switchyard-peer-probe: rows copied from or to peers' mapped buffers, ranks as threads or processes.\n"
      "Each rank copies --rows rows of --row-bytes; 'read' pulls them from the owners' buffers into its own\n"
      "memory (the symmetric dispatch's pull), 'write' pushes its rows into them (the push combine); the\n"
      "rows sit at random or sequential rows within --span-mib of each owner's buffer. Reported: the\n"
      "slowest rank's kernel time (median over --iters), and the bytes all ranks moved over it."};
  app.add_option("--ranks", o.ranks, "ranks (rank r on GPU r mod the visible count)")
      ->check(CLI::Range(1, 64));
  app.add_option("--ranks-as", o.ranks_as, "threads or processes")
      ->check(CLI::IsMember({"threads", "processes"}));
  app.add_option("--rows", o.rows, "rows per rank")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--row-bytes", o.row_bytes, "bytes per row, a multiple of 16")
      ->check(CLI::Range(16u, 1u << 20));
  app.add_option("--span-mib", o.spans_mib, "spans of the owners' buffers to sweep, MiB")
      ->check(CLI::Range(int64_t{1}, int64_t{16384}));
  app.add_option("--direction", o.directions, "read and/or write")->check(CLI::IsMember({"read", "write"}));
  app.add_option("--owner", o.owners, "peers and/or self")->check(CLI::IsMember({"peers", "self"}));
  app.add_option("--order", o.orders, "random and/or sequential")
      ->check(CLI::IsMember({"random", "sequential"}));
  app.add_option("--blocks", o.blocks, "blocks per rank (0: SMs over the ranks sharing a GPU)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--threads", o.threads, "threads per block, a multiple of 32")->check(CLI::Range(32, 1024));
  app.add_option("--shared-kib", o.shared_kib, "dynamic shared memory per block, KiB (occupancy only)")
      ->check(CLI::Range(0, 227));
  app.add_option("--own-memory", o.own_memory, "malloc or pool: where this rank's own rows live")
      ->check(CLI::IsMember({"malloc", "pool"}));
  app.add_option("--own-span-mib", o.own_span_mib,
                 "> 0: this rank's rows at distinct random rows of an own region this large (MiB)")
      ->check(CLI::Range(int64_t{0}, int64_t{16384}));
  app.add_option("--routes", o.routes,
                 "table: row addresses from a table of this rank's; peer-written: (owner, row) records that "
                 "the previous rank writes into this rank's buffer before every copy (reads only)")
      ->check(CLI::IsMember({"table", "peer-written"}));
  app.add_option("--shared-extra-kib", o.shared_extra_kib,
                 "KiB added to every shared buffer's allocation (its size off the large-page multiples)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_flag("--owner-writes", o.owner_writes,
               "each owner rewrites its span before every copy (a publish)");
  app.add_option("--iters", o.iters, "timed iterations")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", o.warmup, "untimed iterations first")->check(CLI::Range(0, 100000));
  app.add_option("--json", json_path, "also write the results here");
  try {
    app.parse(argc, argv);
    if (o.row_bytes % 16 != 0)
      throw CLI::ValidationError("--row-bytes",
                                 "expected a multiple of 16, got " + std::to_string(o.row_bytes));
    if (o.routes == "peer-written" &&
        std::find(o.directions.begin(), o.directions.end(), "write") != o.directions.end())
      throw CLI::ValidationError("--routes", "expected --direction read with peer-written routes, got write");
    if (o.threads % 32 != 0)
      throw CLI::ValidationError("--threads", "expected a multiple of 32, got " + std::to_string(o.threads));
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }
  try {
    return run(o, json_path);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "switchyard-peer-probe: %s\n", error.what());
    return 1;
  }
}
