"""Sub-plugins: the only place in torch_pjrt that names a chip.

``DevicePlugin`` is the base class vendors subclass; ``cpu``, ``cuda`` and ``tpu`` are the built-in
sub-plugins; ``registry`` discovers every ``torch_pjrt.plugins`` entry point and picks one.
"""

from .base import DevicePlugin

__all__ = ["DevicePlugin"]
