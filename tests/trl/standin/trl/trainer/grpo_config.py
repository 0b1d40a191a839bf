"""Stand-in GRPOConfig: the fields the adapter's shell reads, with TRL's validations."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class GRPOConfig:
    output_dir: str = "out"
    report_to: Any = None
    use_cpu: bool = False
    bf16: bool = False
    logging_strategy: str = "steps"
    save_strategy: str = "steps"
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    steps_per_generation: int | None = None
    generation_batch_size: int | None = None
    gradient_checkpointing_kwargs: Any = None
    num_generations: int = 8
    num_generations_eval: int | None = None
    max_completion_length: int = 512
    chat_template_kwargs: Any = None
    pad_to_multiple_of: int | None = None
    use_vllm: bool = False
    vllm_importance_sampling_correction: bool = True
    vllm_importance_sampling_mode: str = "sequence_mask"
    vllm_importance_sampling_clip_max: float | None = 3.0
    vllm_importance_sampling_clip_min: float | None = None
    loss_type: str = "dapo"
    multi_objective_aggregation: str = "sum_then_normalize"
    scale_rewards: str = "group"
    importance_sampling_level: str = "token"
    off_policy_mask_threshold: float | None = None
    mask_truncated_completions: bool = False
    top_entropy_quantile: float = 1.0
    entropy_coef: float = 0.0
    use_adaptive_entropy: bool = False
    num_iterations: int = 1
    epsilon: float = 0.2
    epsilon_high: float | None = None
    delta: float | None = None
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    beta: float = 0.0
    use_bias_correction_kl: bool = True
    log_multimodal: bool = False
    reward_weights: Any = None

    def __post_init__(self) -> None:
        if self.steps_per_generation is None:
            self.steps_per_generation = self.gradient_accumulation_steps
        self.generation_batch_size = self.per_device_train_batch_size * self.steps_per_generation
        if self.generation_batch_size % self.num_generations != 0:
            raise ValueError("generation_batch_size must be divisible by num_generations")
        if self.num_generations < 2:
            raise ValueError("GRPO requires at least 2 generations per prompt")
        low, high = self.vllm_importance_sampling_clip_min, self.vllm_importance_sampling_clip_max
        if low is not None and high is not None and low >= high:
            raise ValueError("vllm_importance_sampling_clip_min must be less than clip_max")
        if (
            self.vllm_importance_sampling_mode.endswith("_truncate")
            and low is None
            and high is None
        ):
            raise ValueError("a *_truncate mode needs a clip bound")
