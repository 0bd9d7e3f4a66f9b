"""A failed C++ CHECK that aborts a runner (glog or absl FATAL line) is the crash's headline
(engine/diagnosis.py)."""

from __future__ import annotations

from conformance.engine.diagnosis import diagnose

GLOG_CHECK = """\
[scenario step] xm.save of a subset, then mark_step
F1101 12:34:56.789012  4242 pjrt_computation_client.cc:567] Check failed: !buffer->IsDeleted() \
buffer with shape s64[1] on device CPU:0 is deleted
*** Check failure stack trace: ***
    @     0x7f0000000001  google::LogMessage::Fail()
    @     0x7f0000000002  google::LogMessageFatal::~LogMessageFatal()
Fatal Python error: Aborted

Current thread 0x00007f0000000000 (most recent call first):
  File "torch_xla/torch_xla.py", line 87 in sync
"""

ABSL_FATAL = """\
F0000 00:00:1730000000.123456   77 tfrt_cpu_pjrt_client.cc:1203] Check failed: ok (0 vs. 1)
*** SIGABRT received by PID 77 (TID 77) on cpu 0 from PID 77; stack trace: ***
"""


def test_glog_check_failed_is_the_headline():
    headline, detail = diagnose(GLOG_CHECK)
    assert headline == (
        "Check failed: !buffer->IsDeleted() buffer with shape s64[1] on device CPU:0 is deleted "
        "(pjrt_computation_client.cc:567)"
    )
    assert "in sync" in detail


def test_absl_fatal_line_is_the_headline():
    headline, _ = diagnose(ABSL_FATAL)
    assert headline == "Check failed: ok (0 vs. 1) (tfrt_cpu_pjrt_client.cc:1203)"


def test_check_failed_raised_as_an_exception_is_no_headline():
    # torch_xla 2.9 raises its XLA_CHECKs: a traceback's text is not what aborted the process
    text = "RuntimeError: Check failed: !buffer->IsDeleted(): buffer with shape s64[1] is deleted"
    assert diagnose(text)[0] is None


def test_sanitizer_and_glibc_messages_still_come_first():
    headline, _ = diagnose("free(): invalid pointer\n" + GLOG_CHECK)
    assert headline == "free(): invalid pointer"
