"""Where the model tier's models run: a device and a number format, chosen once.

``evaluation.model.device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``) and
``evaluation.model.dtype`` (``auto``, ``bf16``, ``fp16``, ``fp32``) resolve here into a
:class:`Placement` that every runtime (the detectors' classifiers, the sentence encoder,
the seq2seq and reward models) moves its model to. A device torch does not see is a
:class:`~ragpulse.errors.ConfigError` that says the fix, raised when the collector is
built, never on a record. ``cpu`` (and ``auto`` resolved without torch installed) never
imports torch here.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ragpulse.errors import ConfigError

if TYPE_CHECKING:
    from ragpulse.plugin_context import PluginContext

Dtype = Literal["fp32", "bf16", "fp16"]
_TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
_CUDA = re.compile(r"^cuda(?::(\d+))?$")
CPU_MAX_BATCH_TOKENS = 4096
GPU_MAX_BATCH_TOKENS = 32768


@dataclass(frozen=True)
class Placement:
    """A resolved device (``cpu``, ``cuda:0``, ``mps``) and number format."""

    device: str = "cpu"
    dtype: Dtype = "fp32"

    @property
    def accelerator(self) -> bool:
        """True on a GPU (CUDA or mps): the forward passes leave the host CPU free."""
        return self.device != "cpu"

    @property
    def torch_dtype(self) -> Any:
        import torch

        return getattr(torch, _TORCH_DTYPES[self.dtype])

    def max_batch_tokens(self, configured: int | None) -> int:
        """Padded tokens per forward pass: the setting, else this device's default."""
        if configured is not None:
            return configured
        return GPU_MAX_BATCH_TOKENS if self.accelerator else CPU_MAX_BATCH_TOKENS

    def __str__(self) -> str:
        return f"{self.device}, {self.dtype}"


def resolve_placement(device: str = "auto", dtype: str = "auto") -> Placement:
    """The placement ``device`` and ``dtype`` (settings values) name on this machine;
    ConfigError when the device is not there or cannot run the format."""
    if device == "cpu" or (device == "auto" and importlib.util.find_spec("torch") is None):
        return Placement("cpu", _cpu_dtype(dtype))
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu":
            return Placement("cpu", _cpu_dtype(dtype))
    if device == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(
                "evaluation.model.device is mps, but torch sees no Apple GPU (mps): set "
                "evaluation.model.device to auto or cpu"
            )
        return Placement("mps", "fp16" if dtype == "auto" else _known(dtype))
    found = _CUDA.match(device)
    if found is None:
        raise ConfigError(f"evaluation.model.device {device!r}: use auto, cpu, cuda, cuda:N or mps")
    if not torch.cuda.is_available():
        build = torch.__version__
        raise ConfigError(
            f"evaluation.model.device is {device}, but torch {build} sees no CUDA device"
            + (" (a CPU-only build)" if "+cpu" in build or torch.version.cuda is None else "")
            + ": install a CUDA build of torch (https://pytorch.org/get-started/locally/) "
            "on a machine with an NVIDIA GPU, or set evaluation.model.device to cpu"
        )
    count = torch.cuda.device_count()
    index = int(found.group(1)) if found.group(1) is not None else torch.cuda.current_device()
    if index >= count:
        raise ConfigError(
            f"evaluation.model.device is {device}, but torch sees {count} CUDA device(s) "
            f"(cuda:0 to cuda:{count - 1}): pick one of them, or cuda"
        )
    bf16 = bool(torch.cuda.is_bf16_supported())
    if dtype == "auto":
        return Placement(f"cuda:{index}", "bf16" if bf16 else "fp16")
    if dtype == "bf16" and not bf16:
        raise ConfigError(
            f"evaluation.model.dtype is bf16, but cuda:{index} "
            f"({torch.cuda.get_device_name(index)}) has no bf16: set it to fp16 or auto"
        )
    return Placement(f"cuda:{index}", _known(dtype))


def _cpu_dtype(dtype: str) -> Dtype:
    return "fp32" if dtype == "auto" else _known(dtype)


def _known(dtype: str) -> Dtype:
    if dtype not in _TORCH_DTYPES:
        raise ConfigError(f"evaluation.model.dtype {dtype!r}: use auto, bf16, fp16 or fp32")
    return dtype  # type: ignore[return-value]


PLACEMENT_KEY = "ragpulse/model-placement"
"""The plug-in context key of the model tier's :class:`Placement` (resolved once)."""


def context_placement(context: PluginContext | None) -> Placement:
    """The placement of the model tier's settings in ``context``, resolved once per
    context; without one, the CPU."""
    if context is None:
        return Placement()
    model = context.settings.evaluation.model
    return context.shared(PLACEMENT_KEY, lambda: resolve_placement(model.device, model.dtype))


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is a device running out of memory (CUDA, mps, or the allocator)."""
    name = type(exc).__name__
    return name == "OutOfMemoryError" or "out of memory" in str(exc).lower()
