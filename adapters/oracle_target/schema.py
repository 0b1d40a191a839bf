"""Oracle-target operations for `schema`: padded tensors -> ragged lists -> oracle -> padded."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from rlconform.conformance.harness import non_tensor_rows, pad_left, pad_right, torch_dtype
from rlconform.oracle import schema as oracle_schema


class SchemaOps:
    """`schema` operations that delegate to `rlconform.oracle.schema`."""

    def normalize_samples(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return oracle_schema.normalize_samples(records)

    def find_misaligned(self, samples: list[dict[str, Any]]) -> list[Any]:
        return oracle_schema.find_misaligned(samples)

    def build_batch(self, samples: list[dict[str, Any]]) -> TensorDict:
        reward_key = self.profile.get("reward_key", "score")
        columns = oracle_schema.build_batch(samples, reward_key=reward_key)
        float_dtype = torch_dtype(self.profile.dtype)
        tensors = {}
        for name, (kind, dtype, shape) in oracle_schema.BATCH_SCHEMA.items():
            if kind != "tensor":
                continue
            torch_type = float_dtype if dtype == "float" else torch.int64
            values = columns[name]
            if shape == "B":
                tensors[name] = pad_right([[v] for v in values], width=1, dtype=torch_type)[:, 0]
            elif name == "prompts":
                tensors[name] = pad_left(values, dtype=torch_type)
            else:
                tensors[name] = pad_right(values, dtype=torch_type)
        batch = TensorDict(tensors, batch_size=[len(samples)]).to(self.device)
        for name, (kind, _, _) in oracle_schema.BATCH_SCHEMA.items():
            if kind == "non_tensor":
                batch[name] = non_tensor_rows(columns[name])
        return batch
