"""Stand-in KL controllers (same constructor and update signatures as ROLL's)."""

from rlconform.adapters.torchref import TorchRef

_REF = TorchRef(dtype="float64")


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
        return None


def get_kl_controller(init_kl_coef, target_kl=None, kl_horizon=None):
    if target_kl is None:
        return FixedKLController(kl_coef=init_kl_coef)
    return AdaptiveKLController(init_kl_coef=init_kl_coef, target=target_kl, horizon=kl_horizon)
