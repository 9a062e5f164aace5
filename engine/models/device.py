"""The torch device, chosen once per process and reported, and whether it computes bfloat16."""
from __future__ import annotations

import functools
import logging
import os
import warnings

from engine.errors import InvalidInputError, KGQAWarning

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def pick_device(preferred: str | None = None) -> str:
    """``cuda`` when available, CPU otherwise; ``preferred`` (or ``$KGQA_DEVICE``) overrides, and
    is checked: a device torch cannot use here is an error naming it, never a crash at load."""
    import torch

    if preferred is not None:
        choice = _usable(preferred, "device")  # given by --device or by a Python caller
    elif os.environ.get("KGQA_DEVICE"):
        choice = _usable(os.environ["KGQA_DEVICE"], "$KGQA_DEVICE")
    else:
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    log.info("torch device: %s", choice)
    return choice


def _usable(name: str, given_as: str) -> str:
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise InvalidInputError(f"{given_as} {name!r} is not a torch device: use cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise InvalidInputError(f"{given_as} {name}: torch {torch.__version__} sees no CUDA GPU on this machine: "
                                    "use cpu (or leave the device out)")
        if device.index is not None and device.index >= count:
            raise InvalidInputError(f"{given_as} {name}: this machine has {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise InvalidInputError(f"{given_as} {name}: Apple's MPS is not available here: use cpu")
    elif device.type != "cpu":
        raise InvalidInputError(f"{given_as} {name}: the engine runs on cpu, cuda or mps, not {device.type}")
    return name


@functools.lru_cache(maxsize=None)
def native_bf16(device: str) -> bool:
    """Whether ``device`` computes bfloat16 in hardware: a CUDA GPU that supports it, or a CPU on
    which torch's oneDNN runs bfloat16 matrix products (x86 with AVX-512 or AMX, Arm with its BF16
    extension). Elsewhere, such as on a CPU with AVX2 alone, torch converts bfloat16 in software,
    several times slower than float32 (:mod:`benchmarks.training` measures it)."""
    import torch

    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.is_available() and bool(torch.cuda.is_bf16_supported())
    if kind != "cpu":
        return True  # MPS and the like run bfloat16 in their own kernels
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN: converted in software
        return False


def bf16_or_warn(device: str, before: str, after: str, *, stacklevel: int = 2) -> bool:
    """Whether ``device`` computes bfloat16 (:func:`native_bf16`); where it does not, a warning
    that says so between ``before`` and ``after`` (``stacklevel`` as the caller would give it to
    ``warnings.warn``)."""
    if native_bf16(device):
        return True
    lacks = ("this CPU has no bfloat16 arithmetic that torch uses (AVX-512 or AMX)" if device == "cpu"
             else f"{device} has no bfloat16 arithmetic")
    warnings.warn(KGQAWarning(f"{before}{lacks}{after}"), stacklevel=stacklevel + 1)
    return False
