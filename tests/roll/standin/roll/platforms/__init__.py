"""Stand-in for ``roll.platforms``: a CPU platform."""

import types

current_platform = types.SimpleNamespace(device_type="cpu")
