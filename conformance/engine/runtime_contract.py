"""The runtime contract of an accelerator: its items, where PyTorch documents each, what each
needs of the device profile, and the run header's lines about them.

The items are checked by the contract cases (`conformance/contract/`, one test per item, named
`test_<item with _>`); this table is what the header, the records and docs/RUNTIME_CONTRACT.md
agree on. An item's `needs` are names of `engine/profile.py` NEEDS: a device without one gets the
item skipped with the profile's reason ("contract: streams: none (...): N cases not
applicable"), never failed. The producer of every fence tested is held busy first
(engine/busy.py: the optional hook `set_delay`, else the device module's `_sleep`, else
calibrated standard work) and seen busy before the fence is tested; the header says how, and an
item that could not see it says "not observable".
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.engine.profile import DeviceProfile

ACCELERATOR_DOC = "docs/source/accelerator (torch.accelerator)"
STREAM_DOC = "torch.Stream (docs/source/torch.rst, torch/_streambase; torch.cuda.Stream)"
EVENT_DOC = "torch.Event (torch.cuda.Event: record, query, synchronize, elapsed_time)"
NOTES_DOC = "docs/source/notes/cuda.rst (asynchronous execution, CUDA streams, pinned memory)"


@dataclass(frozen=True)
class ContractItem:
    """One item of the runtime contract."""

    name: str
    what: str  # what a conforming device does (the case's claim)
    doc: str  # the PyTorch documentation the item comes from
    needs: tuple[str, ...] = ()  # facts of the device profile (engine/profile.py NEEDS)

    @property
    def test(self) -> str:
        """The name of the contract case (its record id)."""
        return "test_" + self.name.replace("-", "_")


ITEMS: tuple[ContractItem, ...] = (
    ContractItem(
        "declared-dtypes",
        "torch.accelerator.get_device_capability()['supported_dtypes'] lists the dtypes whose "
        "tensors the device allocates, copies to and from the host and converts on the device "
        "as CPU does, and no other (engine/declared_dtypes.py)",
        "torch.accelerator.get_device_capability (torch >= 2.10): supported_dtypes",
    ),
    ContractItem(
        "accelerator-device",
        "torch.accelerator names the device type, counts as the device module does, and "
        "set_device_index / device_index(i) switch the current device and restore it, also on "
        "an exception",
        f"{ACCELERATOR_DOC}: current_accelerator, device_count, current_device_index, "
        "set_device_index, device_index",
    ),
    ContractItem(
        "device-guard",
        "inside device_index(1) (the device guard) a tensor created without an index lands on "
        "device 1 and an op of device-1 tensors computes there; on exit, and on an exception, "
        "device 0 is current again",
        f"{ACCELERATOR_DOC}: device_index; torch.cuda.device / DeviceGuard",
        ("second device",),
    ),
    ContractItem(
        "current-stream",
        "torch.accelerator.current_stream() is the default stream until set_stream(s); then it "
        "is s, ops and copies launched go to s (behind its earlier work, beside the former "
        "stream's), and setting the default stream back restores it",
        f"{ACCELERATOR_DOC}: current_stream, set_stream",
        ("streams",),
    ),
    ContractItem(
        "stream-guard",
        "`with stream:` makes stream current and restores the previous stream on exit and on an "
        "exception; a stream of device 1 also makes device 1 current for its block",
        f"{STREAM_DOC}: __enter__/__exit__ (StreamGuard); torch.cuda.stream",
        ("streams",),
    ),
    ContractItem(
        "stream-synchronize",
        "Stream.synchronize() returns after the stream's queued work: query() is then True and "
        "the output of a kernel queued on it is final, read on any stream",
        f"{STREAM_DOC}: query, synchronize",
        ("streams",),
    ),
    ContractItem(
        "accelerator-synchronize",
        "torch.accelerator.synchronize() (and the device module's synchronize) wait for the work "
        "of every stream of the device",
        f"{ACCELERATOR_DOC}: synchronize; torch.cuda.synchronize",
        ("streams",),
    ),
    ContractItem(
        "event-synchronize",
        "Event.synchronize() returns once the work recorded before the event is done: query() "
        "is then True",
        f"{EVENT_DOC}: record, query, synchronize",
        ("streams", "events"),
    ),
    ContractItem(
        "event-elapsed-time",
        "elapsed_time of timing events is ordered (a->b plus b->c is a->c, none negative) and "
        "covers the queued work between them",
        f"{EVENT_DOC}: Event(enable_timing=True), elapsed_time",
        ("streams", "events"),
    ),
    ContractItem(
        "stream-priority",
        "torch.Stream(priority=p) is accepted for the greatest and least priority and runs work "
        "correctly; where the device module tells a stream's priority, it is the one asked for",
        f"{STREAM_DOC}: torch.Stream(device, priority); torch.cuda.Stream.priority_range",
        ("streams",),
    ),
    ContractItem(
        "wait-stream",
        "side.wait_stream(current) orders the side stream's later work after the current "
        "stream's queued work: it reads the final values",
        f"{STREAM_DOC}: wait_stream",
        ("streams",),
    ),
    ContractItem(
        "wait-event",
        "an event recorded on one stream and waited on by another (wait_event) orders that "
        "stream's later work after the recorded work",
        f"{STREAM_DOC}: wait_event, record_event; {EVENT_DOC}: wait",
        ("streams", "events"),
    ),
    ContractItem(
        "generator-state",
        "a torch.Generator per device: the same seed gives the same draws, a state saved after "
        "draws and restored resumes there, the device module's seed and rng state govern the "
        "draws, devices 0 and 1 keep their own states, fork_rng restores the device's default "
        "generator",
        "torch.Generator (get_state, set_state, manual_seed); torch.random.fork_rng",
        ("generator",),
    ),
    ContractItem(
        "memory-stats",
        "torch.accelerator.memory_allocated grows by at least the bytes allocated and falls "
        "back after they are freed, as the device module's does; memory_reserved is never below "
        "it; empty_cache releases a freed block",
        f"{ACCELERATOR_DOC}: memory_allocated, memory_reserved, empty_cache",
    ),
    ContractItem(
        "pinned-memory",
        "Tensor.pin_memory() gives a pinned copy with the same values (is_pinned() True), a "
        "pageable tensor is not pinned",
        f"torch.Tensor.pin_memory, is_pinned; {NOTES_DOC}",
        ("streams",),
    ),
    ContractItem(
        "nonblocking-h2d",
        "a non_blocking host->device copy from pinned and from pageable memory is seen with its "
        "values by later work on the same stream",
        f"torch.Tensor.to(non_blocking=True), copy_; {NOTES_DOC}",
        ("streams",),
    ),
    ContractItem(
        "nonblocking-d2h",
        "a non_blocking device->host copy into pinned memory holds its final values the moment "
        "an event recorded after it is synchronized; into pageable memory it is final on return",
        f"torch.Tensor.to(non_blocking=True), copy_; {NOTES_DOC}",
        ("streams", "events"),
    ),
    ContractItem(
        "record-stream",
        "a block freed after record_stream(side) is not reused while the side stream's work "
        "queued before the free still reads it",
        "torch.Tensor.record_stream; docs/source/notes/cuda.rst (memory management)",
        ("streams",),
    ),
)

BY_NAME: dict[str, ContractItem] = {item.name: item for item in ITEMS}
BY_TEST: dict[str, ContractItem] = {item.test: item for item in ITEMS}


def item_of_test(name: str) -> ContractItem | None:
    """The contract item a case runs, from its test name (parameters ignored)."""
    return BY_TEST.get(name.split("[", 1)[0])


def not_applicable(profile: DeviceProfile) -> dict[str, list[str]]:
    """The profile's reason -> the items it leaves out."""
    out: dict[str, list[str]] = {}
    for item in ITEMS:
        reason = profile.missing(item.needs)
        if reason is not None:
            out.setdefault(reason, []).append(item.name)
    return out


def header_lines(profile: DeviceProfile, delay_hook: bool) -> list[str]:
    """The contract's run header lines: what the cases rely on, what the profile leaves out
    (one line per reason), and whether races are caught every time."""
    lines = [
        f"contract: {len(ITEMS)} items (docs/RUNTIME_CONTRACT.md) through standard APIs only: "
        "torch.accelerator, torch.Stream, torch.Event, torch.Generator, Tensor.pin_memory/"
        f"record_stream/non_blocking copies, torch.{profile.device_type} (device_count, "
        "synchronize, stream_priority where it has one)"
    ]
    skipped = not_applicable(profile)
    streams = profile.missing(("streams",))
    for reason, names in skipped.items():
        if reason == streams:
            lines.append(
                f"contract: streams: none ({_why(profile.streams.how)}): {len(names)} cases not "
                "applicable"
            )
        else:
            lines.append(
                f"contract: {reason}: {_cases(len(names))} not applicable ({', '.join(names)})"
            )
    if streams is None:
        lines.append(
            "contract: busy streams: the backend's set_delay hook holds the producer of every "
            "fence tested (its stream's kernels sleep)"
            if delay_hook
            else f"contract: busy streams: no set_delay hook: torch.{profile.device_type}._sleep "
            "calibrated with timing events where it has one, else standard work (mul_, add, mm) "
            "calibrated on the device in each runner (engine/busy.py)"
        )
        lines.append(
            "contract: each ordering item proves its stream busy (query() False) before it "
            "tests the fence; one that could not (a synchronous device, work the host keeps up "
            "with) passes with 'not observable' and the reason, counted in the summary"
        )
    return lines


def _why(how: str) -> str:
    """The refusal in how the probe learned a fact (its exception's message), else all of it."""
    for marker in ("Error: ", "Exception: "):
        if marker in how:
            return how.split(marker, 1)[1]
    return how


def _cases(n: int) -> str:
    return f"{n} case" if n == 1 else f"{n} cases"
