"""Stand-in for ``roll.distributed.strategy.strategy``: the mini-batch counters a training
strategy stores in ``meta_info`` (ROLL's method names, call order and all-reduce protocol:
every count goes through ``dist.all_reduce``; ``_get_global_valid_samples`` reduces the row
count first, then one count per loss-mask key). The adapter compiles these methods from
this file with its own ``dist``; the module-level import is never used by them."""

import torch
import torch.distributed as dist  # noqa: F401 - the adapter supplies its own

from roll.utils.constants import IGNORE_INDEX


class InferenceStrategy:
    def _get_batch_num_tokens(self, batch, dp_group=None):
        out = {}
        for key in batch.meta_info["loss_mask_keys"]:
            if key not in batch.batch.keys():
                continue
            mask = batch.batch[key]
            if key in ("labels", "labels_for_loss"):
                mask = mask != IGNORE_INDEX
            elif key == "response_mask":
                mask = mask[:, 1:]
            count = mask.to(torch.int64).sum()
            dist.all_reduce(count, op=dist.ReduceOp.SUM, group=dp_group)
            out[key] = count
        return out

    def _get_global_valid_samples(self, batch, dp_group=None):
        rows = torch.tensor(len(batch))
        dist.all_reduce(rows, op=dist.ReduceOp.SUM, group=dp_group)
        out = {"default": rows}
        for key in batch.meta_info["loss_mask_keys"]:
            if key not in batch.batch.keys():
                continue
            mask = batch.batch[key]
            if key == "response_mask":
                mask = mask[:, 1:]
            count = mask.bool().any(dim=-1).to(torch.int64).sum()
            dist.all_reduce(count, op=dist.ReduceOp.SUM, group=dp_group)
            out[key] = count
        return out
