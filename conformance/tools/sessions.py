"""Kept for noxfiles written by earlier versions of ``python -m conformance.tools.init``, which do
``from conformance.tools.sessions import register``; new ones import :mod:`conformance.ci.sessions`.
"""

from conformance.ci.sessions import register

__all__ = ["register"]
