from .loss import PolicyLoss, ValueLoss, aggregate_loss

__all__ = ["PolicyLoss", "ValueLoss", "aggregate_loss"]
