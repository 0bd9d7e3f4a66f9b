"""echo_npu exposing only set_fallback_routes of the optional hooks: the fallback path of
registered ops is routed but cannot be proven (no fallback_counts), and the routes in force
before a routed case cannot be read back (no get_fallback_routes). The run header must say so."""

import echo_npu  # registers the device

set_fallback_routes = echo_npu.set_fallback_routes
