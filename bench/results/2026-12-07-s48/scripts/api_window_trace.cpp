// Session 48 experiment (not part of the library): a CUPTI injection library (CUDA_INJECTION64_PATH) that
// prints the CUDA driver calls a thread makes between the launch of one kernel and the launch of another
// (SY_TRACE_FROM and SY_TRACE_TO: '|'-separated substrings of the kernels' symbol names), for windows
// SY_TRACE_FIRST .. SY_TRACE_FIRST + SY_TRACE_COUNT - 1 of each thread. Question it answers: what does the
// engine's call put on the stream between the bench's hold kernel and the dispatch kernel, beside the launch
// itself?
#include <cupti.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Entry {
  double us;
  std::string name;
};

struct ThreadWindow {
  bool open = false;
  int windows = 0;
  double opened_us = 0;
  std::vector<Entry> entries;
};

std::mutex mutex;
std::map<std::thread::id, ThreadWindow> windows;
const char* from_kernel = nullptr;
const char* to_kernel = nullptr;
int first_window = 20, window_count = 2;

// Whether `symbol` contains one of `names` ('|'-separated substrings).
bool matches(const char* symbol, const char* names) {
  const char* begin = names;
  while (*begin) {
    const char* end = std::strchr(begin, '|');
    const size_t length = end ? static_cast<size_t>(end - begin) : std::strlen(begin);
    if (length > 0 && std::string(symbol).find(std::string(begin, length)) != std::string::npos) return true;
    if (!end) break;
    begin = end + 1;
  }
  return false;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void print_window(const ThreadWindow& window, double closed_us) {
  std::string text;
  char line[512];
  std::snprintf(line, sizeof line, "trace pid %d window %d: %.1f us, %zu driver calls\n", getpid(),
                window.windows, closed_us - window.opened_us, window.entries.size());
  text += line;
  for (const Entry& entry : window.entries) {
    std::snprintf(line, sizeof line, "trace pid %d   +%8.2f %s\n", getpid(), entry.us - window.opened_us,
                  entry.name.c_str());
    text += line;
  }
  std::fputs(text.c_str(), stderr);
}

void CUPTIAPI on_driver_call(void*, CUpti_CallbackDomain, CUpti_CallbackId cbid, const void* data) {
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (info->callbackSite != CUPTI_API_ENTER) return;
  const double t = now_us();
  const bool launch = cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel ||
                      cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx ||
                      cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz ||
                      cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz;
  const char* symbol = launch && info->symbolName ? info->symbolName : "";
  std::string name = info->functionName ? info->functionName : "?";
  if (launch) name += std::string(" ") + symbol;
  const std::lock_guard<std::mutex> lock(mutex);
  ThreadWindow& window = windows[std::this_thread::get_id()];
  if (window.open && !(launch && matches(symbol, from_kernel))) {
    window.entries.push_back({t, name});
    if (launch && matches(symbol, to_kernel)) {
      window.open = false;
      if (window.windows >= first_window && window.windows < first_window + window_count)
        print_window(window, t);
      ++window.windows;
    }
    return;
  }
  if (launch && matches(symbol, from_kernel)) {
    window.open = true;
    window.opened_us = t;
    window.entries.clear();
    window.entries.push_back({t, name});
  }
}

}  // namespace

extern "C" int InitializeInjection() {
  from_kernel = std::getenv("SY_TRACE_FROM") ? std::getenv("SY_TRACE_FROM") : "timer_wait_kernel";
  to_kernel = std::getenv("SY_TRACE_TO") ? std::getenv("SY_TRACE_TO") : "symmetric_dispatch_kernel";
  if (const char* first = std::getenv("SY_TRACE_FIRST")) first_window = std::atoi(first);
  if (const char* count = std::getenv("SY_TRACE_COUNT")) window_count = std::atoi(count);
  CUpti_SubscriberHandle subscriber;
  if (cuptiSubscribe(&subscriber, on_driver_call, nullptr) != CUPTI_SUCCESS) {
    std::fputs("trace: cuptiSubscribe failed\n", stderr);
    return 0;
  }
  cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
  std::fprintf(stderr, "trace pid %d: from %s to %s, windows %d..%d\n", getpid(), from_kernel, to_kernel,
               first_window, first_window + window_count - 1);
  return 1;
}
