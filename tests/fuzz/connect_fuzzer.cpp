// Handle deserialisation in Buffer::connect(): the handles of 1-3 real ranks (threads or processes
// sharing), edited as the input says (bytes and fields overwritten, truncated, extended, swapped,
// spliced, replaced by random bytes, renamed to a foreign shared-memory segment whose size and
// identity page the input chose), or fully random. connect() must throw InvalidArgument, or return
// where the edits left every byte that it reads as it was. A refused connect must change nothing
// (the real handles connect afterwards), and once the buffers are gone no segment of theirs may
// remain mapped or in /dev/shm.
#include <fcntl.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/handle_format.hpp"
#include "core/heap_identity.hpp"
#include "fuzz_outcome.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::fuzz {
namespace {

// The CPU payload after the header, as src/cpu/host_heap.cpp writes it: pid, heap address, nonce,
// then a 64-byte shared-memory name. The oracle below needs to know which bytes connect() reads.
constexpr size_t kHeader = sizeof(detail::HandleHeader);
constexpr size_t kPidAt = kHeader, kAddressAt = kHeader + 8, kNonceAt = kHeader + 16, kNameAt = kHeader + 24;
constexpr size_t kNameBytes = 64;
constexpr size_t kCpuHandleBytes = kNameAt + kNameBytes;
// NOTES: random handles longer than this add nothing: every check fails on the size first.
constexpr size_t kMaxRandomHandleBytes = 2 * kCpuHandleBytes;

BufferOptions options_for(int num_ranks, int rank, HeapSharing sharing) {
  BufferOptions options;
  options.topology = Topology::single_node(num_ranks);
  options.rank = rank;
  options.sharing = sharing;
  // A small heap: a few pages per rank, so that each input makes its buffers in microseconds.
  options.config.num_channels = 1;
  options.config.ring_slots = 4;
  options.config.chunk_tokens = 2;
  options.config.timeout_seconds = 5.0;
  options.sizing.max_tokens_per_rank = 4;
  options.sizing.hidden = 128;
  options.sizing.topk = 2;
  options.sizing.num_experts = 4 * num_ranks;
  options.sizing.symmetric_max_tokens_per_rank = 2;
  return options;
}

std::string name_in(const Bytes& handle) {
  if (handle.size() < kCpuHandleBytes) return {};
  const char* name = reinterpret_cast<const char*>(handle.data() + kNameAt);
  return std::string(name, strnlen(name, kNameBytes - 1));
}

bool same_range(const Bytes& a, const Bytes& b, size_t at, size_t bytes) {
  return std::equal(a.begin() + at, a.begin() + at + bytes, b.begin() + at);
}

// Whether `edited` reads, to a connect() of rank `self`, as the real handle of rank `peer`.
bool reads_as_real(const Bytes& edited, const Bytes& real, int peer, int self, HeapSharing sharing) {
  if (edited.size() != real.size() || real.size() != kCpuHandleBytes) return false;
  if (!same_range(edited, real, 0, kHeader) || !same_range(edited, real, kNonceAt, 8)) return false;
  if (peer == self) return true;  // its own heap is known: only the identity is compared
  if (sharing == HeapSharing::threads) {
    return same_range(edited, real, kPidAt, 8) && same_range(edited, real, kAddressAt, 8);
  }
  return name_in(edited) == name_in(real);
}

// A shared-memory segment that is no switchyard heap, of a size and identity page the input chose.
class ForeignSegment {
 public:
  ForeignSegment(FuzzedDataProvider& input, size_t heap_allocation)
      : name_("/switchyard-fuzz-" + std::to_string(getpid())) {
    shm_unlink(name_.c_str());
    const int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) finding("could not create the foreign segment " + name_);
    size_t bytes = heap_allocation;
    switch (input.ConsumeIntegralInRange<int>(0, 4)) {
      case 0:
        bytes = 0;
        break;
      case 1:
        bytes = detail::kHeapIdentityBytes;
        break;
      case 2:
        bytes = heap_allocation + input.ConsumeIntegralInRange<size_t>(1, 4096);
        break;
      case 3:
        bytes = input.ConsumeIntegralInRange<size_t>(0, heap_allocation);
        break;
      default:
        break;
    }
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) finding("could not size the foreign segment");
    const std::vector<uint8_t> page =
        input.ConsumeBytes<uint8_t>(std::min<size_t>(bytes, sizeof(detail::HeapIdentity) + 8));
    if (!page.empty() && pwrite(fd, page.data(), page.size(), 0) != static_cast<ssize_t>(page.size())) {
      finding("could not write the foreign segment");
    }
    close(fd);
  }
  ~ForeignSegment() { shm_unlink(name_.c_str()); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

class Edits {
 public:
  Edits(FuzzedDataProvider& input, std::vector<Bytes>& handles, size_t heap_allocation)
      : input_(input), handles_(handles), heap_allocation_(heap_allocation) {}

  void apply_one() {
    if (handles_.empty()) return;
    Bytes& handle = handles_[input_.ConsumeIntegralInRange<size_t>(0, handles_.size() - 1)];
    switch (input_.ConsumeIntegralInRange<int>(0, 8)) {
      case 0:
        flip_byte(handle);
        break;
      case 1:
        overwrite_word(handle);
        break;
      case 2:
        handle.resize(input_.ConsumeIntegralInRange<size_t>(0, kMaxRandomHandleBytes));
        break;
      case 3:
        handle =
            input_.ConsumeBytes<uint8_t>(input_.ConsumeIntegralInRange<size_t>(0, kMaxRandomHandleBytes));
        break;
      case 4:
        handle = handles_[input_.ConsumeIntegralInRange<size_t>(0, handles_.size() - 1)];
        break;
      case 5:
        splice_payload(handle);
        break;
      case 6:
        resize_list();
        break;
      case 7:
        rename(handle, input_.ConsumeRandomLengthString(kNameBytes));
        break;
      default:
        foreign_ = std::make_unique<ForeignSegment>(input_, heap_allocation_);
        rename(handle, foreign_->name());
        break;
    }
  }

 private:
  void flip_byte(Bytes& handle) {
    if (handle.empty()) return;
    handle[input_.ConsumeIntegralInRange<size_t>(0, handle.size() - 1)] ^=
        input_.ConsumeIntegralInRange<uint8_t>(1, 255);
  }

  // A 4- or 8-byte field set to a value at an edge: 0, 1, all ones, the sign bit, or any.
  void overwrite_word(Bytes& handle) {
    const size_t width = input_.ConsumeBool() ? 4 : 8;
    if (handle.size() < width) return;
    const size_t at = input_.ConsumeIntegralInRange<size_t>(0, (handle.size() - width) / 4) * 4;
    uint64_t value = 0;
    switch (input_.ConsumeIntegralInRange<int>(0, 5)) {
      case 0:
        value = 0;
        break;
      case 1:
        value = 1;
        break;
      case 2:
        value = ~uint64_t{0};
        break;
      case 3:
        value = width == 4 ? uint64_t{1} << 31 : uint64_t{1} << 63;
        break;
      case 4: {
        uint64_t current = 0;
        std::memcpy(&current, handle.data() + at, width);
        value = current + (input_.ConsumeBool() ? 1 : -1);
        break;
      }
      default:
        value = input_.ConsumeIntegral<uint64_t>();
        break;
    }
    std::memcpy(handle.data() + at, &value, width);  // little-endian: the low bytes for a 4-byte field
  }

  void splice_payload(Bytes& handle) {
    const Bytes& from = handles_[input_.ConsumeIntegralInRange<size_t>(0, handles_.size() - 1)];
    if (handle.size() < kHeader || from.size() < kHeader) return;
    Bytes spliced(handle.begin(), handle.begin() + kHeader);
    spliced.insert(spliced.end(), from.begin() + kHeader, from.end());
    handle = std::move(spliced);
  }

  void resize_list() {
    if (input_.ConsumeBool() && !handles_.empty()) {
      handles_.pop_back();
    } else {
      handles_.push_back(handles_[input_.ConsumeIntegralInRange<size_t>(0, handles_.size() - 1)]);
    }
  }

  void rename(Bytes& handle, const std::string& name) {
    if (handle.size() < kCpuHandleBytes) return;
    std::memset(handle.data() + kNameAt, 0, kNameBytes);
    std::memcpy(handle.data() + kNameAt, name.data(), std::min(name.size(), kNameBytes));
  }

  FuzzedDataProvider& input_;
  std::vector<Bytes>& handles_;
  size_t heap_allocation_;
  std::unique_ptr<ForeignSegment> foreign_;  // unlinked when the edits are done with
};

// Mappings of this process's heap segments (/dev/shm/switchyard-<pid>-...) in /proc/self/maps.
std::string mapped_heap_segments() {
  const std::string segment = "/switchyard-" + std::to_string(getpid()) + "-";
  std::string mapped;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find(segment) != std::string::npos) mapped += line + "\n";
  }
  return mapped;
}

void fuzz_one(FuzzedDataProvider& input) {
  const int num_ranks = input.ConsumeIntegralInRange<int>(1, 3);
  const HeapSharing sharing = input.ConsumeBool() ? HeapSharing::threads : HeapSharing::processes;
  const int self = input.ConsumeIntegralInRange<int>(0, num_ranks - 1);
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<Bytes> real;
  for (int rank = 0; rank < num_ranks; ++rank) {
    buffers.push_back(std::make_unique<Buffer>(options_for(num_ranks, rank, sharing)));
    real.push_back(buffers.back()->local_handle());
    if (real.back().size() != kCpuHandleBytes) {
      finding("a cpu handle has " + std::to_string(real.back().size()) + " bytes, this fuzzer expects " +
              std::to_string(kCpuHandleBytes) + ": update its payload layout");
    }
  }
  std::vector<std::string> names;
  for (const Bytes& handle : real) names.push_back(name_in(handle));

  std::vector<Bytes> handles = real;
  {
    Edits edits(input, handles, detail::kHeapIdentityBytes + buffers[0]->heap_bytes());
    if (input.ConsumeIntegral<uint8_t>() < 32) {
      for (Bytes& handle : handles)
        handle = input.ConsumeBytes<uint8_t>(input.ConsumeIntegralInRange<size_t>(0, kMaxRandomHandleBytes));
    }
    const int count = input.ConsumeIntegralInRange<int>(0, 6);
    for (int i = 0; i < count; ++i) edits.apply_one();

    Buffer& buffer = *buffers[self];
    std::string refusal;
    const Outcome outcome = checked_call("connect", [&] {
      try {
        buffer.connect(handles);
      } catch (const Error& error) {
        refusal = error.what();
        throw;
      }
    });
    if (std::getenv("SWITCHYARD_FUZZ_VERBOSE")) {
      std::fprintf(stderr, "%d ranks (%s), rank %d connects: %s\n", num_ranks,
                   sharing == HeapSharing::threads ? "threads" : "processes", self,
                   refusal.empty() ? "accepted" : refusal.c_str());
    }
    if (outcome == Outcome::other_error) finding("connect: threw an Error other than InvalidArgument");
    if (outcome == Outcome::returned) {
      bool all_real = handles.size() == real.size();
      for (size_t peer = 0; all_real && peer < real.size(); ++peer) {
        all_real = reads_as_real(handles[peer], real[peer], static_cast<int>(peer), self, sharing);
      }
      if (!all_real) finding("connect: accepted handles whose bytes do not all read as the real ones");
    } else if (checked_call("connect after a refusal", [&] { buffer.connect(real); }) != Outcome::returned) {
      finding(
          "connect: the real handles were refused after a refused connect (a refusal changed the buffer)");
    }
  }
  // NOTES: a threads heap stays allocated until every peer has connected to it (the heap registry
  // holds it for them), so the other ranks connect too: without it every input would leak its heaps.
  if (sharing == HeapSharing::threads) {
    for (auto& peer : buffers) {
      if (!peer->is_connected() &&
          checked_call("connect of a peer", [&] { peer->connect(real); }) != Outcome::returned) {
        finding("connect: a peer's real handles were refused");
      }
    }
  }
  buffers.clear();
  const std::string mapped = mapped_heap_segments();
  if (!mapped.empty())
    finding("heap segments are still mapped after their Buffers were destroyed:\n" + mapped);
  for (const std::string& name : names) {
    if (!name.empty() && access(("/dev/shm" + name).c_str(), F_OK) == 0) {
      finding("the segment " + name + " is still in /dev/shm after its Buffers were destroyed");
    }
  }
}

}  // namespace
}  // namespace switchyard::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  switchyard::fuzz::fuzz_one(input);
  return 0;
}
