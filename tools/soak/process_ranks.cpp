#include "process_ranks.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>

#include "support/pipe_bytes.hpp"

namespace switchyard::soak {

namespace {

using testing::read_all;
using testing::receive_bytes;
using testing::send_bytes;
using testing::write_all;

// What a child asks of the parent, one byte ahead of its payload.
enum class Request : uint8_t { allgather = 'A', barrier = 'B', report = 'R', failure = 'F' };

// NOTES: a handle is a few hundred bytes and a report a few lines; anything larger is a broken pipe.
constexpr uint64_t kMaxMessageBytes = 64u << 20;

Bytes bytes_of(const std::string& text) {
  return Bytes(text.begin(), text.end());
}

// A child's side: every collective is one request to the parent and its answer.
class PipeGroup final : public Group {
 public:
  PipeGroup(int rank, int size, int to_parent, int from_parent)
      : rank_(rank), size_(size), to_parent_(to_parent), from_parent_(from_parent) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<Bytes> allgather(const Bytes& mine) override {
    request(Request::allgather, mine);
    std::vector<Bytes> all(size_);
    for (Bytes& bytes : all) {
      if (!receive_bytes(from_parent_, &bytes, kMaxMessageBytes))
        throw std::runtime_error("allgather: the parent went away");
    }
    return all;
  }

  void barrier() override {
    request(Request::barrier, {});
    char done = 0;
    if (!read_all(from_parent_, &done, 1)) throw std::runtime_error("barrier: the parent went away");
  }

  void request(Request kind, const Bytes& payload) {
    const auto byte = static_cast<uint8_t>(kind);
    if (!write_all(to_parent_, &byte, 1) || !send_bytes(to_parent_, payload)) {
      throw std::runtime_error("the parent went away");
    }
  }

 private:
  int rank_, size_, to_parent_, from_parent_;
};

[[noreturn]] void run_child(int rank, int num_ranks, int to_parent, int from_parent,
                            const std::function<RankReport(Group&)>& rank_body) {
  PipeGroup group(rank, num_ranks, to_parent, from_parent);
  int status = 0;
  try {
    group.request(Request::report, bytes_of(rank_body(group).serialize()));
  } catch (const std::exception& error) {
    status = 1;
    try {
      group.request(Request::failure, bytes_of(error.what()));
    } catch (...) {
    }
  }
  // _exit: the parent's atexit handlers and static destructors are not the child's to run.
  _exit(status);
}

struct Child {
  int pid = -1;
  int to_child = -1, from_child = -1;
};

// The parent's side: reads one request from every child per step; all must ask the same.
class Relay {
 public:
  explicit Relay(std::vector<Child>& children) : children_(children) {}

  void serve(ProcessRanksOutcome& outcome) {
    const int num_ranks = static_cast<int>(children_.size());
    outcome.reports.resize(num_ranks);
    for (;;) {
      std::vector<Request> kinds(num_ranks);
      std::vector<Bytes> payloads(num_ranks);
      bool broken = false;
      for (int rank = 0; rank < num_ranks; ++rank) {
        uint8_t kind = 0;
        if (!read_all(children_[rank].from_child, &kind, 1) ||
            !receive_bytes(children_[rank].from_child, &payloads[rank], kMaxMessageBytes)) {
          outcome.errors.push_back("rank " + std::to_string(rank) + " (pid " +
                                   std::to_string(children_[rank].pid) + ") ended without a report");
          broken = true;
          break;
        }
        kinds[rank] = static_cast<Request>(kind);
        if (kinds[rank] == Request::failure) {
          outcome.errors.push_back("rank " + std::to_string(rank) + ": " +
                                   std::string(payloads[rank].begin(), payloads[rank].end()));
          broken = true;
          break;
        }
      }
      if (broken) return;
      for (int rank = 1; rank < num_ranks; ++rank) {
        if (kinds[rank] != kinds[0]) {
          outcome.errors.push_back("rank " + std::to_string(rank) + " asked for '" + char(kinds[rank]) +
                                   "' while rank 0 asked for '" + char(kinds[0]) + "'");
          return;
        }
      }
      if (kinds[0] == Request::report) {
        for (int rank = 0; rank < num_ranks; ++rank) {
          outcome.reports[rank] =
              RankReport::deserialize(std::string(payloads[rank].begin(), payloads[rank].end()));
        }
        return;
      }
      for (const Child& child : children_) {
        bool sent = true;
        if (kinds[0] == Request::allgather) {
          for (const Bytes& payload : payloads) sent = sent && send_bytes(child.to_child, payload);
        } else {
          const char done = 'b';
          sent = write_all(child.to_child, &done, 1);
        }
        if (!sent) {
          outcome.errors.push_back("pid " + std::to_string(child.pid) + " stopped reading");
          return;
        }
      }
    }
  }

 private:
  std::vector<Child>& children_;
};

}  // namespace

ProcessRanksOutcome run_rank_processes(int num_ranks, const std::function<RankReport(Group&)>& rank_body) {
  ProcessRanksOutcome outcome;
  std::vector<Child> children(num_ranks);
  std::fflush(stdout);  // else each child would flush the parent's buffered output again
  std::fflush(stderr);
  for (int rank = 0; rank < num_ranks; ++rank) {
    int to_parent[2], to_child[2];
    if (pipe(to_parent) != 0 || pipe(to_child) != 0) throw std::runtime_error("pipe failed");
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      // The child keeps only its own two ends (earlier children's ends were inherited too).
      for (int earlier = 0; earlier < rank; ++earlier) {
        close(children[earlier].to_child);
        close(children[earlier].from_child);
      }
      close(to_parent[0]);
      close(to_child[1]);
      run_child(rank, num_ranks, to_parent[1], to_child[0], rank_body);
    }
    close(to_parent[1]);
    close(to_child[0]);
    children[rank] = Child{pid, to_child[1], to_parent[0]};
    outcome.pids.push_back(pid);
  }
  Relay(children).serve(outcome);
  // A failed case leaves ranks waiting on peers or on this relay: end them. A finished child has
  // exited already (or is about to), and the signal changes nothing for it.
  const bool failed = !outcome.errors.empty();
  for (const Child& child : children) {
    if (failed) kill(child.pid, SIGKILL);
    close(child.to_child);
    close(child.from_child);
  }
  for (const Child& child : children) {
    int status = 0;
    waitpid(child.pid, &status, 0);
    if (!failed && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      outcome.errors.push_back("pid " + std::to_string(child.pid) + " exited with status " +
                               std::to_string(status));
    }
  }
  return outcome;
}

std::vector<std::string> shm_segments_of(int pid) {
  const std::string prefix = "switchyard-" + std::to_string(pid) + "-";
  std::vector<std::string> found;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* entry = readdir(dir)) {
      if (std::strncmp(entry->d_name, prefix.c_str(), prefix.size()) == 0) found.push_back(entry->d_name);
    }
    closedir(dir);
  }
  return found;
}

}  // namespace switchyard::soak
