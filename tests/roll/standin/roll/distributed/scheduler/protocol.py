"""Stand-in DataProto: a TensorDict batch plus meta_info, as much as the math reads."""

from tensordict import TensorDict


class DataProto:
    def __init__(self, batch=None, non_tensor_batch=None, meta_info=None):
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch or {}
        self.meta_info = meta_info or {}

    @classmethod
    def from_dict(cls, tensors, non_tensors=None, meta_info=None, num_batch_dims=1):
        sizes = {t.shape[0] for t in tensors.values()}
        size = sizes.pop() if sizes else 0
        return cls(TensorDict(dict(tensors), batch_size=[size]), non_tensors, meta_info)

    def __len__(self):
        return self.batch.batch_size[0]

    def rename(self, old_keys=None, new_keys=None):
        old = [old_keys] if isinstance(old_keys, str) else list(old_keys)
        new = [new_keys] if isinstance(new_keys, str) else list(new_keys)
        for a, b in zip(old, new):
            self.batch[b] = self.batch.pop(a)
        return self
