#include "forked_ranks.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "process_group.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

// A child that answered exits with this; any other end means it died.
constexpr int kChildAnswered = 0;
// NOTES: how often the parent looks for children that died while it waits for their answers.
constexpr int kPollMilliseconds = 200;

void write_all(int fd, const std::string& bytes) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t count = write(fd, bytes.data() + written, bytes.size() - written);
    if (count < 0 && errno == EINTR) continue;
    if (count <= 0) return;  // the parent is gone: nobody to answer
    written += static_cast<size_t>(count);
  }
}

std::string how_it_died(int rank, int status) {
  if (WIFSIGNALED(status))
    return "rank " + std::to_string(rank) + " was killed by signal " + std::to_string(WTERMSIG(status));
  return "rank " + std::to_string(rank) + " exited with status " + std::to_string(WEXITSTATUS(status)) +
         " without an answer";
}

struct Child {
  pid_t pid = -1;
  int fd = -1;  // the read end of its pipe, -1 once at its end
  std::string answer;
  bool exited = false;
  int status = 0;
};

// Forks one child that runs `body` and writes what it returns to a pipe; the parent keeps the read end.
Child fork_child(const std::function<std::string()>& body) {
  int fds[2];
  if (pipe(fds) != 0)
    throw SystemError(std::string("switchyard-bench: pipe failed: ") + std::strerror(errno));
  // Whatever the parent buffered must not be written twice.
  std::fflush(stdout);
  std::fflush(stderr);
  // The children share the parent's stdout and stderr: appending, each write lands whole at the end instead
  // of over a sibling's at a shared offset (session 35: the 8 ranks' stamp lines, written at once into one
  // log file, overwrote parts of each other).
  for (const int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    const int flags = fcntl(fd, F_GETFL);
    if (flags >= 0 && !(flags & O_APPEND)) fcntl(fd, F_SETFL, flags | O_APPEND);
  }
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw SystemError(std::string("switchyard-bench: fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    close(fds[0]);
    write_all(fds[1], body());
    close(fds[1]);
    std::fflush(stderr);
    _exit(kChildAnswered);
  }
  close(fds[1]);
  Child child;
  child.pid = pid;
  child.fd = fds[0];
  return child;
}

// Reads every child's answer until each pipe ends; `on_death(index, status)` is called for a child that
// exits while others are still answering.
void collect(std::vector<Child>& children, const std::function<void(size_t, int)>& on_death) {
  char chunk[1 << 14];
  for (;;) {
    std::vector<pollfd> polled;
    std::vector<size_t> index;
    for (size_t i = 0; i < children.size(); ++i) {
      if (children[i].fd < 0) continue;
      polled.push_back({children[i].fd, POLLIN, 0});
      index.push_back(i);
    }
    if (polled.empty()) break;
    if (poll(polled.data(), polled.size(), kPollMilliseconds) < 0 && errno != EINTR) break;
    for (size_t p = 0; p < polled.size(); ++p) {
      if (polled[p].revents == 0) continue;
      Child& child = children[index[p]];
      const ssize_t count = read(child.fd, chunk, sizeof(chunk));
      if (count > 0) {
        child.answer.append(chunk, static_cast<size_t>(count));
      } else if (count == 0 || errno != EINTR) {
        close(child.fd);
        child.fd = -1;
      }
    }
    for (size_t i = 0; i < children.size(); ++i) {
      Child& child = children[i];
      if (child.exited) continue;
      if (waitpid(child.pid, &child.status, WNOHANG) == child.pid) {
        child.exited = true;
        if (!(WIFEXITED(child.status) && WEXITSTATUS(child.status) == kChildAnswered))
          on_death(i, child.status);
      }
    }
  }
  for (Child& child : children) {
    if (!child.exited && waitpid(child.pid, &child.status, 0) == child.pid) child.exited = true;
  }
}

}  // namespace

std::vector<std::string> run_forked_ranks(
    int num_ranks, double wait_seconds, const std::function<std::string(Group&)>& rank_main,
    const std::function<std::string(std::exception_ptr)>& describe_failure) {
  ProcessGroupState state(num_ranks, wait_seconds);
  std::vector<Child> children;
  for (int rank = 0; rank < num_ranks; ++rank) {
    children.push_back(fork_child([&, rank]() -> std::string {
      ProcessGroup group(state, rank);
      try {
        return rank_main(group);
      } catch (const std::exception& error) {
        state.abort("rank " + std::to_string(rank) + ": " + error.what());
        return describe_failure(std::current_exception());
      } catch (...) {
        state.abort("rank " + std::to_string(rank) + " failed");
        return describe_failure(std::current_exception());
      }
    }));
  }
  collect(children,
          [&](size_t rank, int status) { state.abort(how_it_died(static_cast<int>(rank), status)); });
  std::vector<std::string> answers;
  for (size_t rank = 0; rank < children.size(); ++rank) {
    Child& child = children[rank];
    const bool answered = WIFEXITED(child.status) && WEXITSTATUS(child.status) == kChildAnswered;
    answers.push_back(answered && !child.answer.empty()
                          ? child.answer
                          : describe_failure(std::make_exception_ptr(Error(
                                "switchyard-bench: " + how_it_died(static_cast<int>(rank), child.status)))));
  }
  return answers;
}

std::string run_in_forked_child(const std::function<std::string()>& work) {
  // The first byte says whether the rest is the answer or what went wrong.
  std::vector<Child> children{fork_child([&]() -> std::string {
    try {
      return "+" + work();
    } catch (const std::exception& error) {
      return std::string("-") + error.what();
    }
  })};
  collect(children, [](size_t, int) {});
  const Child& child = children.front();
  if (child.answer.empty())
    throw Error("switchyard-bench: a probe process died: " + how_it_died(0, child.status));
  if (child.answer[0] == '-') throw Error(child.answer.substr(1));
  return child.answer.substr(1);
}

}  // namespace switchyard::bench
