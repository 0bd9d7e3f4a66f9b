// echo_npu runtime personalities (ECHO_NPU_RUNTIME): what enpuInit and the runtime's entry points
// do differently under each. Internal to the runtime (the C API is in runtime.h).
#pragma once
#include "runtime.h"

namespace enpu::persona {
// Called once by enpuInit, under its lock, before the runtime counts as initialised: takes the
// device (exclusive), waits (slow_init), starts the runtime threads (threaded, teardown_hang).
// An error leaves nothing behind: a later enpuInit tries again.
enpuError_t on_init();
// "threaded": in a forked child of the initialising process, waits forever for the driver lock
// (held by the parent's event thread at fork time). Returns at once otherwise.
void fork_gate();
// The message of the calling thread's last enpuErrorDeviceBusy.
const char* busy_message();
}  // namespace enpu::persona
