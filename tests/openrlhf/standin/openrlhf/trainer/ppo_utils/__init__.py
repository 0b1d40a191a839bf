from .experience import Experience
from .kl_controller import AdaptiveKLController, FixedKLController

__all__ = ["AdaptiveKLController", "Experience", "FixedKLController"]
