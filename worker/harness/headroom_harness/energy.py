"""Energy: NVML's total-energy counter and board power (read around the
timed steps of a run), and the energy probe's generation window
(`generate`: tokens per joule at a quantization)."""

import json
import platform
import time

import torch
import torch.nn as nn

from headroom_harness.errors import SpecError
from headroom_harness.records import emit
from headroom_harness.torch_support import is_oom


class Nvml:
    """The few NVML calls the harness makes, through ctypes (no package
    needed): the total-energy counter (mJ since the driver loaded), the
    board power (mW) and the device's used memory. Raises NvmlError where
    NVML or the counter is missing."""

    class NvmlError(RuntimeError):
        pass

    def __init__(self, device):
        import ctypes
        self._ctypes = ctypes
        try:
            self._lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as error:
            raise Nvml.NvmlError(f"NVML not found: {error}") from None
        if self._lib.nvmlInit_v2() != 0:
            raise Nvml.NvmlError("nvmlInit_v2 failed")
        self._handle = ctypes.c_void_p()
        uuid = None
        props = torch.cuda.get_device_properties(device)
        if hasattr(props, "uuid"):
            uuid = str(props.uuid)
            if not uuid.startswith("GPU-"):
                uuid = "GPU-" + uuid
        found = -1
        if uuid is not None:
            found = self._lib.nvmlDeviceGetHandleByUUID(
                uuid.encode(), ctypes.byref(self._handle))
        if found != 0:
            # CUDA and NVML order devices alike unless CUDA_VISIBLE_DEVICES
            # or CUDA_DEVICE_ORDER says otherwise.
            found = self._lib.nvmlDeviceGetHandleByIndex_v2(
                ctypes.c_uint(device.index or 0), ctypes.byref(self._handle))
        if found != 0:
            raise Nvml.NvmlError(f"NVML has no handle for {device}")
        self.energy_mj()  # raises when the counter is not supported

    def energy_mj(self):
        value = self._ctypes.c_ulonglong()
        if self._lib.nvmlDeviceGetTotalEnergyConsumption(
                self._handle, self._ctypes.byref(value)) != 0:
            raise Nvml.NvmlError("this GPU has no total-energy counter "
                                 "(nvmlDeviceGetTotalEnergyConsumption)")
        return value.value

    def used_bytes(self):
        """The device's used memory (nvmlDeviceGetMemoryInfo), bytes: every
        process's, the driver's own reservation included."""
        class Memory(self._ctypes.Structure):
            _fields_ = [("total", self._ctypes.c_ulonglong),
                        ("free", self._ctypes.c_ulonglong),
                        ("used", self._ctypes.c_ulonglong)]
        memory = Memory()
        if self._lib.nvmlDeviceGetMemoryInfo(self._handle, self._ctypes.byref(memory)) != 0:
            raise Nvml.NvmlError("nvmlDeviceGetMemoryInfo failed")
        return memory.used

    def power_w(self):
        value = self._ctypes.c_uint()
        if self._lib.nvmlDeviceGetPowerUsage(self._handle,
                                             self._ctypes.byref(value)) != 0:
            raise Nvml.NvmlError("nvmlDeviceGetPowerUsage failed")
        return value.value / 1000.0


def open_nvml(device):
    """Nvml for a CUDA device, or None (CPU, or NVML missing)."""
    if device.type != "cuda":
        return None
    try:
        return Nvml(device)
    except Nvml.NvmlError:
        return None


def _versions():
    versions = {"torch": torch.__version__, "python": platform.python_version()}
    if torch.version.cuda:
        versions["cuda"] = torch.version.cuda
    for name in ("transformers", "bitsandbytes"):
        try:
            module = __import__(name)
            versions[name] = getattr(module, "__version__", "unknown")
        except Exception:  # missing or broken: said by the failure record
            pass
    return versions


def _quantize_linears(model, quant, device):
    """Replaces every nn.Linear but the output head with a bitsandbytes
    NF4 (Linear4bit) or INT8 (Linear8bitLt) layer holding the same weights;
    moving it to the GPU quantizes it. Raises ImportError without
    bitsandbytes."""
    import bitsandbytes as bnb
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Linear) or child is head:
                continue
            bias = child.bias is not None
            if quant == "nf4":
                layer = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=bias,
                                          compute_dtype=torch.float16, quant_type="nf4")
                layer.weight = bnb.nn.Params4bit(child.weight.data.to("cpu"),
                                                 requires_grad=False, quant_type="nf4")
            else:
                layer = bnb.nn.Linear8bitLt(child.in_features, child.out_features, bias=bias,
                                            has_fp16_weights=False, threshold=6.0)
                layer.weight = bnb.nn.Int8Params(child.weight.data.to("cpu"),
                                                 requires_grad=False, has_fp16_weights=False)
            if bias:
                layer.bias = nn.Parameter(child.bias.data.to("cpu"), requires_grad=False)
            setattr(parent, name, layer.to(device))


def _build_generator(hf_config_path, quant, device):
    """The Hugging Face architecture of `hf_config_path` with random weights
    in fp16, quantized as asked; (model, params, vocab)."""
    try:
        import transformers
    except ImportError as error:
        raise SpecError(f"transformers is not installed: {error}") from None
    with open(hf_config_path) as f:
        config_dict = json.load(f)
    if not isinstance(config_dict, dict) or "model_type" not in config_dict:
        raise SpecError("--hf_config: a config.json with a model_type is needed")
    config = transformers.AutoConfig.for_model(**config_dict)
    # Random weights of the architecture: nothing is downloaded.
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float16)
    params = sum(p.numel() for p in model.parameters())
    model.eval()
    if quant == "fp16":
        model.to(device)
    else:
        _quantize_linears(model, quant, device)
        model.to(device)  # what was not quantized (embeddings, norms, head)
    return model, params, int(config.vocab_size)


def _generate(model, prompt, new_tokens):
    out = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                         do_sample=False, pad_token_id=0, eos_token_id=None)
    return out.shape[1] - prompt.shape[1]


def run_generation(hf_config, quant, device, prompt_tokens, new_tokens, warmup, idle_s):
    """One energy probe window; emits one "generation" line (with an error
    instead of figures where the quantization or NVML cannot run here)."""
    line = {"event": "generation", "quant": quant, "prompt_tokens": prompt_tokens,
            "versions": _versions()}
    try:
        if device.type != "cuda":
            raise SpecError("an energy probe needs a CUDA device (NVML's energy counter)")
        nvml = Nvml(device)
        # Idle power before anything is loaded: reported apart.
        readings = []
        end = time.perf_counter() + idle_s
        while time.perf_counter() < end:
            readings.append(nvml.power_w())
            time.sleep(0.05)
        idle_w = sum(readings) / len(readings) if readings else nvml.power_w()
        if quant != "fp16":
            try:
                import bitsandbytes  # noqa: F401
            except Exception as error:
                raise SpecError(f"{quant} needs bitsandbytes, which does not import here: "
                                f"{type(error).__name__}: {error}") from None
        model, params, vocab = _build_generator(hf_config, quant, device)
        generator = torch.Generator(device="cpu").manual_seed(0)
        prompt = torch.randint(0, vocab, (1, prompt_tokens), generator=generator).to(device)
        with torch.inference_mode():
            for _ in range(warmup):
                _generate(model, prompt, min(new_tokens, 16))
            torch.cuda.synchronize(device)
            e0, t0 = nvml.energy_mj(), time.perf_counter()
            generated = _generate(model, prompt, new_tokens)
            torch.cuda.synchronize(device)
            e1, t1 = nvml.energy_mj(), time.perf_counter()
        window_s = t1 - t0
        energy_j = (e1 - e0) / 1000.0
        line.update({"tokens_generated": int(generated), "energy_j": energy_j,
                     "idle_w": idle_w, "window_s": window_s,
                     "tokens_per_s": generated / window_s if window_s > 0 else None,
                     "j_per_1k_tokens": energy_j * 1000.0 / generated if generated else None,
                     "params": int(params)})
    except (SpecError, Nvml.NvmlError) as error:
        line["error"] = str(error)
    except Exception as error:  # the failure is the result
        line["oom"] = is_oom(error)
        line["error"] = f"{type(error).__name__}: {error}"
    emit(line)
