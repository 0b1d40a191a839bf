"""Stand-in for openrlhf.trainer.ppo_utils.kl_controller (torchref's update rule)."""

from rlconform.adapters.torchref import TorchRef

_REF = TorchRef()


class AdaptiveKLController:
    def __init__(self, init_kl_coef, target, horizon):
        self.value, self.target, self.horizon = init_kl_coef, target, horizon

    def update(self, current, n_steps):
        self.value = _REF.kl_controller_update(
            "adaptive", self.value, current, n_steps, self.target, self.horizon
        )


class FixedKLController:
    def __init__(self, kl_coef):
        self.value = kl_coef

    def update(self, current, n_steps):
        pass
