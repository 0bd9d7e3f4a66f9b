// echo_npu runtime personalities (ECHO_NPU_RUNTIME, all off by default): behaviours of real
// GPU-class vendor runtimes, so that the suite's CI meets them on CPU.
//   threaded       enpuInit starts driver threads; the event thread holds the driver lock for
//                  good (as a driver's interrupt thread holds its own locks). A forked child of
//                  the initialising process that enters the runtime waits for that lock forever:
//                  a real futex wait on a mutex held at fork time by a thread the child does not
//                  have (CUDA's "cannot re-initialize in forked subprocess", without torch's check)
//   exclusive      one process at a time (a VFIO device): an exclusive non-blocking flock on a
//                  lock file at enpuInit; the holder writes its pid there; the kernel drops the
//                  lock when the holder's last descriptor closes (its end, a crash included)
//   slow_init      enpuInit takes 2 s
//   teardown_hang  exit() of the initialising process joins a runtime thread that never ends
#include "personality.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;

std::atomic<unsigned> g_flags{0};
std::string g_lock_path;
std::string g_device_name = "npu";
thread_local std::string t_busy;

// "threaded": the driver lock, held for good by the event thread from enpuInit on.
std::mutex g_driver_lock;

// "teardown_hang": the runtime's service thread, joined by exit() (never destroyed).
std::thread* g_service = nullptr;
pid_t g_service_pid = 0;

void name_thread(const char* name) { pthread_setname_np(pthread_self(), name); }

void start_event_thread() {
  // the lock is held before enpuInit returns: a fork right after initialisation finds it held
  std::promise<void> holding;
  std::future<void> held = holding.get_future();
  std::thread([holding = std::move(holding)]() mutable {
    name_thread("enpu-drv-event");
    g_driver_lock.lock();  // never released
    holding.set_value();
    for (;;) std::this_thread::sleep_for(1s);  // "waits for device interrupts"
  }).detach();
  held.wait();
}

void join_service_at_exit() {
  // only the process that started it: a forked child has no such thread (and never hangs here)
  if (g_service && g_service_pid == getpid()) g_service->join();  // never returns
}

void start_service_thread() {
  g_service = new std::thread([] {
    for (;;) std::this_thread::sleep_for(1s);
  });
  pthread_setname_np(g_service->native_handle(), "enpu-drv-svc");  // named before enpuInit returns
  g_service_pid = getpid();
  std::atexit(join_service_at_exit);
}

// The holder's pid as it wrote it into the lock file (it may not have written it yet: retries
// for up to 200 ms); 0 when unknown.
long holder_pid(int fd) {
  for (int i = 0; i < 100; ++i) {
    char buf[32] = {};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n > 0) {
      long pid = std::strtol(buf, nullptr, 10);
      if (pid > 0) return pid;
    }
    std::this_thread::sleep_for(2ms);
  }
  return 0;
}

enpuError_t take_device() {
  const char* path = g_lock_path.c_str();
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    t_busy = std::string("device unavailable: cannot open the device lock ") + path + ": " +
             std::strerror(errno) + " (ECHO_NPU_RUNTIME=exclusive)";
    return enpuErrorDeviceBusy;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const long pid = err == EWOULDBLOCK ? holder_pid(fd) : 0;
    close(fd);
    if (err != EWOULDBLOCK) {
      t_busy = std::string("device unavailable: cannot lock ") + path + ": " + std::strerror(err) +
               " (ECHO_NPU_RUNTIME=exclusive)";
    } else {
      t_busy = "device busy: " + g_device_name + " is opened by " +
               (pid > 0 ? "process " + std::to_string(pid) : std::string("another process")) +
               " (ECHO_NPU_RUNTIME=exclusive)";
    }
    return enpuErrorDeviceBusy;
  }
  // ours until this process (and any child that inherited the descriptor) ends
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // the lock is held all the same; the holder's pid just stays unknown to others
  }
  return enpuSuccess;
}

}  // namespace

namespace enpu::persona {

enpuError_t on_init() {
  const unsigned f = g_flags.load();
  if (!f) return enpuSuccess;
  if (f & enpuPersonalityExclusive)
    if (enpuError_t e = take_device(); e != enpuSuccess) return e;
  if (f & enpuPersonalitySlowInit) std::this_thread::sleep_for(2s);
  if (f & enpuPersonalityThreaded) start_event_thread();
  if (f & enpuPersonalityTeardownHang) start_service_thread();
  return enpuSuccess;
}

void fork_gate() {
  if (!(g_flags.load(std::memory_order_relaxed) & enpuPersonalityThreaded)) return;
  if (!enpuIsForkedChild()) return;
  // the parent's event thread held this lock when the parent forked; no thread of this process
  // will ever release it
  g_driver_lock.lock();
  g_driver_lock.unlock();
}

const char* busy_message() { return t_busy.c_str(); }

}  // namespace enpu::persona

extern "C" {

enpuError_t enpuSetPersonality(unsigned flags, const char* lock_path, const char* device_name) {
  if (flags & ~15u) return enpuErrorInvalidValue;
  if (enpuIsInitialized()) return flags == g_flags.load() ? enpuSuccess : enpuErrorInvalidValue;
  if ((flags & enpuPersonalityExclusive) && (!lock_path || !*lock_path))
    return enpuErrorInvalidValue;
  g_lock_path = lock_path ? lock_path : "";
  g_device_name = device_name && *device_name ? device_name : "npu";
  g_flags = flags;
  return enpuSuccess;
}

unsigned enpuGetPersonality(void) { return g_flags.load(); }

}  // extern "C"
